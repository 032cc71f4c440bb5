//go:build !cgo

package cuda

// Without cgo there is no dlopen: every loader returns ErrNoCgo before
// reaching these.
const cgoEnabled = false

func systemLoader() loader { panic("cuda: systemLoader without cgo") }

func newCudartAPI([]uintptr) cudartAPI { panic("cuda: newCudartAPI without cgo") }

func newNCCLAPI(cudartAPI, []uintptr) ncclAPI { panic("cuda: newNCCLAPI without cgo") }
