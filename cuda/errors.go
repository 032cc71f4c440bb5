package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnavailable is wrapped by every error that means "no usable GPU here":
// a platform without GPU support (ErrNoDlopen), a CUDA runtime or NCCL library that cannot be
// found or is not one, no driver, no device. Callers that fall back to the
// host test for it with errors.Is.
var ErrUnavailable = errors.New("cuda: GPU support is unavailable")

// ErrNoDlopen is returned by every loader in a binary without GPU
// support: GPU support is built for linux/amd64 and linux/arm64 (with or
// without cgo), unless the nogpu build tag leaves it out.
var ErrNoDlopen = fmt.Errorf("%w: this binary has no GPU support (it is built for linux/amd64 and linux/arm64, without the nogpu tag), so the CUDA runtime and NCCL cannot be loaded", ErrUnavailable)

// ErrClosed is returned by a Device used after Close.
var ErrClosed = errors.New("cuda: device is closed")

// Error is a failed CUDA runtime call: the call, the cudaError_t code and
// the runtime's own name and description for it.
type Error struct {
	Op   string // the call and its key arguments, e.g. "cudaMalloc(1048576 bytes) on device 0"
	Code int    // the cudaError_t value
	Name string // cudaGetErrorName, e.g. "cudaErrorMemoryAllocation"
	Msg  string // cudaGetErrorString, e.g. "out of memory"
}

// Error implements the error interface.
func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%s, code %d)", e.Op, e.Msg, e.Name, e.Code)
}

// Is reports ErrUnavailable for the codes that mean there is no usable
// driver or device.
func (e *Error) Is(target error) bool {
	if target != ErrUnavailable {
		return false
	}
	switch e.Code {
	case cudaErrorNoDevice, cudaErrorInsufficientDriver, cudaErrorStubLibrary:
		return true
	}
	return false
}

// NCCLError is a failed NCCL call: the call, the ncclResult_t code, NCCL's
// description of the code and, where the library offers it
// (ncclGetLastError, NCCL 2.13+), its last detailed message.
type NCCLError struct {
	Op     string
	Code   int
	Msg    string
	Detail string
}

// Error implements the error interface.
func (e *NCCLError) Error() string {
	s := fmt.Sprintf("cuda: %s: %s (ncclResult %d)", e.Op, e.Msg, e.Code)
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Attempt is one library the loader tried, and why it was not used.
type Attempt struct {
	Path string // what was passed to dlopen (a bare name searches LD_LIBRARY_PATH and the ld.so cache)
	Err  error  // the dlopen message, or a *SymbolError
}

// SymbolError says that a library opened but lacks an entry point the
// package needs: it is not the library asked for, or is too old.
type SymbolError struct {
	Path   string // the file that was opened
	Symbol string // the first missing symbol
	Msg    string // dlerror's message
}

// Error implements the error interface.
func (e *SymbolError) Error() string {
	return fmt.Sprintf("%s lacks symbol %s (%s)", e.Path, e.Symbol, e.Msg)
}

// LoadError says that a library could not be loaded, listing every path
// tried with its error and the directories that held none of the names.
// It wraps ErrUnavailable.
type LoadError struct {
	Library  string    // "CUDA runtime" or "NCCL"
	EnvVar   string    // the override variable, e.g. GOHOROVOD_CUDART_PATH
	Override string    // its value, when it was set (then nothing else was tried)
	Attempts []Attempt // in the order tried
	Searched []string  // directories searched that contained none of the names
}

// Error implements the error interface.
func (e *LoadError) Error() string {
	var b strings.Builder
	if e.Override != "" {
		fmt.Fprintf(&b, "cuda: cannot load the %s from %s=%s", e.Library, e.EnvVar, e.Override)
	} else {
		fmt.Fprintf(&b, "cuda: %s not found (set %s to its path)", e.Library, e.EnvVar)
	}
	for _, a := range e.Attempts {
		fmt.Fprintf(&b, "\n  tried %s: %v", a.Path, a.Err)
	}
	if len(e.Searched) > 0 {
		fmt.Fprintf(&b, "\n  no candidate file in: %s", strings.Join(e.Searched, ", "))
	}
	return b.String()
}

// Unwrap lets errors.Is(err, ErrUnavailable) hold.
func (e *LoadError) Unwrap() error { return ErrUnavailable }

// dlError is a message from dlerror.
type dlError string

func (e dlError) Error() string { return string(e) }

// cudaErr converts a cudaError_t into an error (nil for cudaSuccess).
func cudaErr(api cudartAPI, code int, format string, args ...any) error {
	if code == cudaSuccess {
		return nil
	}
	return &Error{Op: fmt.Sprintf(format, args...), Code: code, Name: api.errorName(code), Msg: api.errorString(code)}
}

// ncclErr converts an ncclResult_t into an error (nil for ncclSuccess).
func ncclErr(api ncclAPI, comm uintptr, code int, format string, args ...any) error {
	if code == ncclSuccess {
		return nil
	}
	return &NCCLError{Op: fmt.Sprintf(format, args...), Code: code, Msg: api.errorString(code), Detail: api.lastError(comm)}
}
