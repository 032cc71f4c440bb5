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
