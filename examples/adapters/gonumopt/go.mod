module github.com/gohorovod/gohorovod/examples/adapters/gonumopt

go 1.26

replace github.com/gohorovod/gohorovod => ../../..

require (
	github.com/gohorovod/gohorovod v0.0.0-00010101000000-000000000000
	github.com/rs/zerolog v1.34.0
	gonum.org/v1/gonum v0.17.0
)

require (
	github.com/ebitengine/purego v0.9.1 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.19 // indirect
	github.com/sbromberger/gompi v0.2.0 // indirect
	golang.org/x/sys v0.30.0 // indirect
	golang.org/x/tools v0.30.0 // indirect
)
