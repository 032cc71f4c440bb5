//go:build !(linux && (amd64 || arm64)) || nogpu

package cuda

// CopyDtoDKernel fails: this build loads no CUDA library.
func (g *GPU) CopyDtoDKernel(dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	return ErrNoDlopen
}

func (g *GPU) launchCopies(dsts, srcs []uintptr, sizes []int) error { return ErrNoDlopen }

func (g *GPU) unloadCopyKernel() {}

// CopyDtoDKernelOf fails: this build loads no CUDA library.
func (g *GPU) CopyDtoDKernelOf(kind CopyKernelKind, dsts, srcs []uintptr, sizes []int) error {
	if err := g.live(); err != nil {
		return err
	}
	return ErrNoDlopen
}

// CopyKernelInUse fails: this build loads no CUDA library.
func (g *GPU) CopyKernelInUse() (CopyKernelKind, error) {
	if err := g.live(); err != nil {
		return 0, err
	}
	return 0, ErrNoDlopen
}

// CopyKernelFailed returns ErrNoDlopen: this build loads no CUDA library.
func (g *GPU) CopyKernelFailed(kind CopyKernelKind) error { return ErrNoDlopen }
