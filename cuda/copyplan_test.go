package cuda

import (
	"bytes"
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// runPieces does on the host what gohorovod_copy_pieces does on the device
// for one launch of grid blocks: each block finds its copy by binary search
// over the first pieces and copies its 64 KiB piece of it, within mem
// (addresses are offsets into mem). It returns the destination spans
// written.
func runPieces(t *testing.T, mem []byte, args *copyKernelArgs, grid int) (written [][2]int) {
	t.Helper()
	n := args.count
	for b := range uint32(grid) {
		lo, hi := uint32(0), n
		for lo+1 < hi {
			mid := (lo + hi) / 2
			if args.firsts[mid] <= b {
				lo = mid
			} else {
				hi = mid
			}
		}
		off := uint64(b-args.firsts[lo]) << copyPieceShift
		end := min(off+1<<copyPieceShift, args.sizes[lo])
		if off >= end {
			t.Fatalf("block %d of %d has no bytes of copy %d (%d bytes, first piece %d)", b, grid, lo, args.sizes[lo], args.firsts[lo])
		}
		d, s := args.dsts[lo]+off, args.srcs[lo]+off
		copy(mem[d:d+end-off], mem[s:s+end-off])
		written = append(written, [2]int{int(d), int(d + end - off)})
	}
	return written
}

// TestFillLaunchesPieces checks the launches that fillLaunches plans,
// run as the pieces kernel runs them, on random batches: every byte of
// every copy arrives exactly once, nothing else is written, no launch has
// an empty copy or more than copyKernelMax copies, and the grid is the
// launch's pieces (so no block is idle or missing).
func TestFillLaunchesPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := []int{0, 1, 3, 4, 16, 100, 1 << 16, 1<<16 + 1, 3<<16 - 4}
	for trial := range 30 {
		k := 1 + rng.IntN(300)
		sizes := make([]int, k)
		srcs, dsts := make([]uintptr, k), make([]uintptr, k)
		srcTotal := 0
		for i := range sizes {
			sizes[i] = lengths[rng.IntN(len(lengths))]
			srcs[i] = uintptr(srcTotal)
			srcTotal += sizes[i] + rng.IntN(17)
		}
		dstTotal := srcTotal
		for i := range sizes {
			dsts[i] = uintptr(dstTotal)
			dstTotal += sizes[i] + 1 + rng.IntN(17)
		}
		mem := make([]byte, dstTotal)
		// A pattern of period 4093 (a prime, so that a piece copied from
		// a multiple of 64 KiB away shows), filled by doubling.
		for i := range min(4093, srcTotal) {
			mem[i] = byte(i*131 + i>>8 + trial)
		}
		for n := 4093; n < srcTotal; n *= 2 {
			copy(mem[n:srcTotal], mem[:n])
		}
		var written [][2]int
		launches, copies := 0, 0
		args := new(copyKernelArgs)
		err := fillLaunches(args, dsts, srcs, sizes, func(p copyPlan) error {
			launches++
			if args.count == 0 || args.count > copyKernelMax {
				t.Fatalf("trial %d: a launch of %d copies", trial, args.count)
			}
			pieces := 0
			for i := range args.count {
				if args.sizes[i] == 0 {
					t.Fatalf("trial %d: an empty copy launched", trial)
				}
				if int(args.firsts[i]) != pieces {
					t.Fatalf("trial %d: copy %d's first piece is %d, want %d", trial, i, args.firsts[i], pieces)
				}
				pieces += copyPieces(int(args.sizes[i]))
			}
			if g := p.grid(CopyKernelPieces); g != pieces {
				t.Fatalf("trial %d: grid %d for %d pieces", trial, g, pieces)
			}
			copies += int(args.count)
			written = append(written, runPieces(t, mem, args, p.grid(CopyKernelPieces))...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// The spans written, in order, must be the non-empty copies'
		// destinations exactly: no byte twice, none missing, none outside.
		slices.SortFunc(written, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
		nonEmpty, w := 0, 0
		for i, n := range sizes {
			d, s := int(dsts[i]), int(srcs[i])
			if !bytes.Equal(mem[d:d+n], mem[s:s+n]) {
				t.Fatalf("trial %d: copy %d of %d bytes arrived wrong", trial, i, n)
			}
			if n == 0 {
				continue
			}
			nonEmpty++
			for at := d; at < d+n; w++ {
				if w == len(written) || written[w][0] != at {
					t.Fatalf("trial %d: copy %d (bytes %d to %d): byte %d not written exactly once", trial, i, d, d+n, at)
				}
				at = written[w][1]
				if at > d+n {
					t.Fatalf("trial %d: copy %d written past its end", trial, i)
				}
			}
		}
		if w != len(written) {
			t.Fatalf("trial %d: %d spans written outside every copy", trial, len(written)-w)
		}
		if copies != nonEmpty || launches != (nonEmpty+copyKernelMax-1)/copyKernelMax {
			t.Fatalf("trial %d: %d copies in %d launches for %d non-empty", trial, copies, launches, nonEmpty)
		}
	}
}

// TestCopyPlanGrid checks the walk's grid (one block per 64 KiB, at least
// one, at most copyKernelBlocks) and that a launch takes no more pieces
// than a grid can have.
func TestCopyPlanGrid(t *testing.T) {
	var p copyPlan
	p.add(1)
	if p.grid(CopyKernelWalk) != 1 || p.grid(CopyKernelPieces) != 1 {
		t.Errorf("one byte: walk %d, pieces %d blocks", p.grid(CopyKernelWalk), p.grid(CopyKernelPieces))
	}
	p.add(5 << 16)
	if p.grid(CopyKernelWalk) != 5 || p.grid(CopyKernelPieces) != 6 {
		t.Errorf("1 + 5*64Ki bytes: walk %d, pieces %d blocks", p.grid(CopyKernelWalk), p.grid(CopyKernelPieces))
	}
	p.add(1 << 40)
	if p.grid(CopyKernelWalk) != copyKernelBlocks {
		t.Errorf("1 TiB: walk %d blocks", p.grid(CopyKernelWalk))
	}
	if p.fits(copyMaxGrid << copyPieceShift) {
		t.Error("a copy of as many pieces as a grid takes fits after others")
	}
	if !(copyPlan{}).fits(copyMaxGrid << copyPieceShift) {
		t.Error("a copy of as many pieces as a grid takes does not fit an empty launch")
	}
}

// TestSelfTestBatch checks that the kernels' check on the device exercises
// what it must: two launches, each kernel path (16-byte words, 4-byte
// words, bytes) with copies of one and of several pieces, empty copies,
// and a byte between destinations.
func TestSelfTestBatch(t *testing.T) {
	srcOff, dstOff, sizes, srcTotal, dstTotal := selfTestBatch()
	nonEmpty := 0
	type path struct {
		align int
		multi bool
	}
	seen := map[path]bool{}
	for i, n := range sizes {
		if srcOff[i]+n > srcTotal || dstOff[i]+n > dstTotal {
			t.Fatalf("copy %d out of its buffers", i)
		}
		if i > 0 && dstOff[i] <= dstOff[i-1]+sizes[i-1] {
			t.Fatalf("copy %d starts %d bytes after copy %d ends", i, dstOff[i]-dstOff[i-1]-sizes[i-1], i-1)
		}
		if n == 0 {
			continue
		}
		nonEmpty++
		a := 1
		switch x := srcOff[i] | dstOff[i] | n; {
		case x%16 == 0:
			a = 16
		case x%4 == 0:
			a = 4
		}
		seen[path{a, copyPieces(n) > 1}] = true
	}
	if nonEmpty <= copyKernelMax || nonEmpty == len(sizes) {
		t.Errorf("%d copies, %d not empty: want empty ones and more than one launch", len(sizes), nonEmpty)
	}
	for _, a := range []int{16, 4, 1} {
		for _, multi := range []bool{false, true} {
			if !seen[path{a, multi}] {
				t.Errorf("no copy takes the %d-byte path with multiple pieces %v", a, multi)
			}
		}
	}
}
