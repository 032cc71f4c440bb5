//go:build (mpi && cgo) || gloo

package optim

import (
	"context"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/tensor"
)

// TestMPIPowerSGD: PowerSGD across processes. At full rank, with every
// matrix compressed, the gradients after Synchronize are the mean of the
// ranks'; at rank 2 the bytes each rank allreduces per step are the
// formula's (Σ (rows+cols)·r·elemsize over the compressed matrices plus
// the other gradients), the gradients of a warm-up step are exact and
// those after are not.
func TestMPIPowerSGD(t *testing.T) {
	coll := jobColl(t)
	rank, size := mpiRT.Rank(), coll.Size()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	full, _, err := newPSGD(coll, PowerSGDConfig{MatrixApproximationRank: 64, MinCompressionRate: 1e-9, StartPowerSGDIter: 1})
	if err != nil {
		t.Fatal(err)
	}
	for s := range 4 {
		if err := psgdStep(ctx, full, rank, s, func() error { return gradsMatchMean(full, size, s, 1e-9) }); err != nil {
			t.Fatalf("rank %d of %d, full rank: %v", rank, size, err)
		}
	}
	if err := full.Close(); err != nil {
		t.Fatal(err)
	}

	const r, start = 2, 1
	var all, want int64
	for _, s := range psgdShapes {
		b := int64(tensor.New(s.dt, s.shape...).NumBytes())
		all += b
		rows, cols, ok := matrixShape(s.shape)
		if rk := min(r, rows, cols); ok && float64(rows*cols) > 2*float64((rows+cols)*rk) {
			want += int64((rows + cols) * rk * s.dt.Size())
		} else {
			want += b
		}
	}
	cc := &counting{Collectives: coll}
	low, _, err := newPSGD(cc, PowerSGDConfig{MatrixApproximationRank: r, StartPowerSGDIter: start})
	if err != nil {
		t.Fatal(err)
	}
	defer low.Close()
	for s := range 3 {
		var exact error
		if err := psgdStep(ctx, low, rank, s, func() error { exact = gradsMatchMean(low, size, s, 1e-9); return nil }); err != nil {
			t.Fatalf("rank %d of %d, rank-%d step %d: %v", rank, size, r, s, err)
		}
		b, _ := cc.take()
		switch {
		case s < start && (b != all || exact != nil):
			t.Fatalf("rank %d of %d: warm-up step %d: %d bytes (want %d), %v", rank, size, s, b, all, exact)
		case s >= start && (b != want || exact == nil):
			t.Fatalf("rank %d of %d: step %d: %d bytes (want %d), exact mean %v", rank, size, s, b, want, exact == nil)
		}
	}
}
