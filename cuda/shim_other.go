//go:build !(linux && (amd64 || arm64)) || nogpu

package cuda

// CUDA and NCCL are loaded on linux/amd64 and linux/arm64 only, and not
// with the nogpu tag, which keeps purego (and with it the dynamic link to
// the C library that dlopen needs) out of the binary: a CGO_ENABLED=0
// build with -tags nogpu is fully static. Every loader returns ErrNoDlopen
// before reaching these.
const dlopenSupported = false

func systemLoader() loader { panic("cuda: systemLoader on an unsupported platform") }

func newCudartAPI([]uintptr) cudartAPI { panic("cuda: newCudartAPI on an unsupported platform") }

func newNCCLAPI(cudartAPI, []uintptr) ncclAPI { panic("cuda: newNCCLAPI on an unsupported platform") }
