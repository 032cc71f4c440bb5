package cuda

import "fmt"

// The copy kernels' launch planning, without the driver: what each launch
// carries and how many blocks it runs, and the batch their check on the
// device copies (copykernel.go). Pure, so that its tests run everywhere.

const (
	// copyKernelMax is the copies one launch takes: three arrays of 128
	// 64-bit values and one of 128 32-bit values fill 3.5 KiB of the 4
	// KiB of kernel parameters.
	copyKernelMax = 128
	// copyKernelThreads is the threads per block. The walk's blocks are
	// one per 64 KiB of the launch's bytes, at least one and at most
	// copyKernelBlocks; the pieces kernel's are one per piece.
	copyKernelThreads = 256
	copyKernelBlocks  = 2048
	// copyPieceShift: the pieces kernel's pieces are 64 KiB.
	copyPieceShift = 16
	// copyMaxGrid is the most blocks of one launch (a grid's x limit).
	copyMaxGrid = 1<<31 - 1
)

// CopyKernelKind names one of the copy kernels of copykernel.ptx.
type CopyKernelKind int

const (
	// CopyKernelPieces (gohorovod_copy_pieces) gives each 64 KiB piece of
	// each copy a block of its own, which finds its copy by binary
	// search: the work per thread does not grow with the number of copies.
	CopyKernelPieces CopyKernelKind = iota
	// CopyKernelWalk (gohorovod_copy_batch) has every thread walk every
	// copy of the launch, grid-stride: every thread's work grows with the
	// number of copies, so it is the second choice (its times beside one
	// plain copy are in docs/BENCHMARKS.md).
	CopyKernelWalk
	copyKernelKinds
)

// String returns the kernel's short name ("pieces" or "walk").
func (k CopyKernelKind) String() string {
	switch k {
	case CopyKernelPieces:
		return "pieces"
	case CopyKernelWalk:
		return "walk"
	}
	return fmt.Sprintf("CopyKernelKind(%d)", int(k))
}

// entry is the kernel's name in the PTX.
func (k CopyKernelKind) entry() string {
	if k == CopyKernelPieces {
		return "gohorovod_copy_pieces"
	}
	return "gohorovod_copy_batch"
}

// copyKernelArgs is the kernels' parameter list: count, then the
// destinations, sources and sizes, and (for the pieces kernel) each
// copy's first piece (the PTX's args, 8-byte aligned). The walk reads the
// first 3 KiB of args only.
type copyKernelArgs struct {
	count  uint32
	_      uint32
	dsts   [copyKernelMax]uint64
	srcs   [copyKernelMax]uint64
	sizes  [copyKernelMax]uint64
	firsts [copyKernelMax]uint32
}

// copyPieces is the number of 64 KiB pieces of a copy of n bytes.
func copyPieces(n int) int { return (n + 1<<copyPieceShift - 1) >> copyPieceShift }

// copyPlan counts what one launch carries.
type copyPlan struct {
	bytes  int
	pieces int
}

// fits reports whether a copy of n bytes may join the launch.
func (p copyPlan) fits(n int) bool { return p.pieces+copyPieces(n) <= copyMaxGrid }

// add counts a copy of n bytes in.
func (p *copyPlan) add(n int) { p.bytes, p.pieces = p.bytes+n, p.pieces+copyPieces(n) }

// grid is the launch's number of blocks for the given kernel.
func (p copyPlan) grid(kind CopyKernelKind) int {
	if kind == CopyKernelPieces {
		return p.pieces
	}
	return min(max(p.bytes>>copyPieceShift, 1), copyKernelBlocks)
}

// fillLaunches fills args with the batch's copies, leaving the empty ones
// out, and calls launch each time args holds a launch's worth (128 copies,
// or as many pieces as a grid takes) and at the end; args.count is 0 again
// after each call.
func fillLaunches(args *copyKernelArgs, dsts, srcs []uintptr, sizes []int, launch func(copyPlan) error) error {
	var plan copyPlan
	flush := func() error {
		if args.count == 0 {
			return nil
		}
		err := launch(plan)
		args.count, plan = 0, copyPlan{}
		return err
	}
	for i, n := range sizes {
		if n == 0 {
			continue
		}
		if !plan.fits(n) {
			if err := flush(); err != nil {
				return err
			}
			if !plan.fits(n) {
				return fmt.Errorf("cuda: a copy of %d bytes is more than one kernel launch can take", n)
			}
		}
		c := args.count
		args.dsts[c], args.srcs[c], args.sizes[c], args.firsts[c] = uint64(dsts[i]), uint64(srcs[i]), uint64(n), uint32(plan.pieces)
		args.count++
		plan.add(n)
		if args.count == copyKernelMax {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// selfTestBatch is the batch a copy kernel copies on the device before it
// is used: 150 copies (137 not empty: two launches), empty, tiny and several pieces long,
// with source and destination offsets that give each of the kernels' three
// paths (16-byte words, 4-byte words, bytes) copies to make, and at least
// one byte between destinations, which must stay untouched. Offsets are
// from the start of the source and of the destination buffer.
func selfTestBatch() (srcOff, dstOff, sizes []int, srcTotal, dstTotal int) {
	lengths := []int{1, 3, 4, 16, 17, 100, 4096, 0, 1 << 16, 1<<16 + 3, 2<<16 + 48} // 11, prime to the 4 alignments
	up := func(x, a int) int { return (x + a - 1) / a * a }
	for i := range 150 {
		n := lengths[i%len(lengths)]
		switch i % 4 {
		case 0: // aligned to 16
			srcTotal, dstTotal = up(srcTotal, 16), up(dstTotal, 16)
		case 1: // aligned to 4, not 16
			srcTotal, dstTotal = up(srcTotal, 16)+4, up(dstTotal, 16)+8
		default: // any
			srcTotal += i % 7
		}
		srcOff, dstOff, sizes = append(srcOff, srcTotal), append(dstOff, dstTotal), append(sizes, n)
		srcTotal += n
		dstTotal += n + 1 + i%5
	}
	return srcOff, dstOff, sizes, srcTotal, dstTotal
}
