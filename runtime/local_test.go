package runtime

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/tensor"
)

func TestRunLocal(t *testing.T) {
	var sizes [3]int
	err := RunLocal(3, func(r *Runtime, rank int) error {
		n := r.Size()
		sizes[rank] = n
		x := tensor.FromFloat32([]float32{float32(rank)})
		if err := r.AllreduceInPlace(context.Background(), x, "x", Sum); err != nil {
			return err
		}
		if got := x.Float32s()[0]; got != 3 {
			return errors.New("sum is not 3")
		}
		return nil
	}, WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if sizes != [3]int{3, 3, 3} {
		t.Errorf("sizes %v, want 3 on every rank", sizes)
	}

	err = RunLocal(2, func(r *Runtime, rank int) error {
		if rank == 1 {
			return errors.New("boom")
		}
		return nil
	}, WithLogger(zerolog.Nop()))
	if err == nil || !strings.Contains(err.Error(), "rank 1: boom") {
		t.Errorf("RunLocal error %v, want rank 1's error named", err)
	}
	if _, err := StartLocal(0); err == nil {
		t.Error("StartLocal(0) succeeded")
	}
}
