package commtest_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

// faulty wraps a correct communicator and breaks one thing about it, to
// check that the suite notices.
type faulty struct {
	comm.Communicator
	allreduce func(c comm.Communicator, buf *tensor.Tensor, op tensor.ReduceOp) error
	bcast     func(c comm.Communicator, buf *tensor.Tensor, root int) error
	gatherv   func(c comm.Communicator, send, recv *tensor.Tensor, counts []int, root int) error
	split     func(c comm.Communicator, color, key int) (comm.Communicator, error)
}

func (f *faulty) Allreduce(buf *tensor.Tensor, op tensor.ReduceOp) error {
	if f.allreduce != nil {
		return f.allreduce(f.Communicator, buf, op)
	}
	return f.Communicator.Allreduce(buf, op)
}

func (f *faulty) Bcast(buf *tensor.Tensor, root int) error {
	if f.bcast != nil {
		return f.bcast(f.Communicator, buf, root)
	}
	return f.Communicator.Bcast(buf, root)
}

func (f *faulty) Gatherv(send, recv *tensor.Tensor, counts []int, root int) error {
	if f.gatherv != nil {
		return f.gatherv(f.Communicator, send, recv, counts, root)
	}
	return f.Communicator.Gatherv(send, recv, counts, root)
}

func (f *faulty) Split(color, key int) (comm.Communicator, error) {
	if f.split != nil {
		return f.split(f.Communicator, color, key)
	}
	return f.Communicator.Split(color, key)
}

// closeOnAbort is an Aborter that only closes: the other ranks learn
// nothing about who failed.
type closeOnAbort struct{ comm.Communicator }

func (c closeOnAbort) Abort(error) error { return c.Close() }

// lostCauseAbort aborts, but the cause it sends is not the one it was given.
type lostCauseAbort struct{ comm.Communicator }

func (c lostCauseAbort) Abort(error) error {
	return c.Communicator.(comm.Aborter).Abort(errors.New("something else"))
}

// TestSuiteCatchesFaults runs the cases over communicators with one fault
// each and checks that the cases aimed at that fault fail, on some rank.
func TestSuiteCatchesFaults(t *testing.T) {
	const n = 3
	tests := []struct {
		name  string
		fault func(f *faulty, rank int)
		cases []string // names of the cases that must fail
	}{
		{"allreduce drops the last rank's contribution", func(f *faulty, rank int) {
			if rank != n-1 {
				return
			}
			f.allreduce = func(c comm.Communicator, buf *tensor.Tensor, op tensor.ReduceOp) error {
				// Contribute zeros, as if this rank's data never left it.
				clear(buf.Bytes())
				return c.Allreduce(buf, op)
			}
		}, []string{"allreduce/float32/sum", "allreduce/float16/max", "allreduce/large/float32/sum", "allreduce/uint64/bitor"}},
		{"allreduce reduces only half of a large buffer", func(f *faulty, rank int) {
			f.allreduce = func(c comm.Communicator, buf *tensor.Tensor, op tensor.ReduceOp) error {
				if buf.Len() < 1000 {
					return c.Allreduce(buf, op)
				}
				return c.Allreduce(buf.Rows(0, buf.Len()/2), op)
			}
		}, []string{"allreduce/large/float32/sum", "allreduce/large/int64/max"}},
		{"errors swallowed on rank 0", func(f *faulty, rank int) {
			if rank != 0 {
				return
			}
			f.allreduce = func(c comm.Communicator, buf *tensor.Tensor, op tensor.ReduceOp) error {
				c.Allreduce(buf, op)
				return nil
			}
			f.bcast = func(c comm.Communicator, buf *tensor.Tensor, root int) error {
				c.Bcast(buf, root)
				return nil
			}
		}, []string{"error/allreduce/lengths-differ", "error/allreduce/op-undefined-on-dtype", "error/bcast/root-out-of-range"}},
		{"bcast always from rank 0", func(f *faulty, rank int) {
			f.bcast = func(c comm.Communicator, buf *tensor.Tensor, root int) error {
				if root < 0 || root >= c.Size() {
					return c.Bcast(buf, root)
				}
				return c.Bcast(buf, 0)
			}
		}, []string{"bcast/every-root"}},
		{"gatherv writes away from the root", func(f *faulty, rank int) {
			f.gatherv = func(c comm.Communicator, send, recv *tensor.Tensor, counts []int, root int) error {
				err := c.Gatherv(send, recv, counts, root)
				if recv != nil && c.Rank() != root {
					clear(recv.Bytes())
				}
				return err
			}
		}, []string{"gatherv/every-root"}},
		{"split ignores keys", func(f *faulty, rank int) {
			f.split = func(c comm.Communicator, color, key int) (comm.Communicator, error) {
				return c.Split(color, 0)
			}
		}, []string{"split/reverse-keys", "split/tied-keys"}},
		{"abort delivers no peer error", func(f *faulty, rank int) {
			f.split = func(c comm.Communicator, color, key int) (comm.Communicator, error) {
				sub, err := c.Split(color, key)
				if err != nil {
					return nil, err
				}
				return closeOnAbort{sub}, nil
			}
		}, []string{"fault/abort-delivers-peer-error", "fault/first-abort-wins"}},
		{"abort sends another cause", func(f *faulty, rank int) {
			f.split = func(c comm.Communicator, color, key int) (comm.Communicator, error) {
				sub, err := c.Split(color, key)
				if err != nil {
					return nil, err
				}
				return lostCauseAbort{sub}, nil
			}
		}, []string{"fault/abort-delivers-peer-error", "fault/first-abort-wins"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group := memcomm.NewGroup(n)
			comms := make([]comm.Communicator, n)
			for r, c := range group {
				f := &faulty{Communicator: c}
				tt.fault(f, r)
				comms[r] = f
			}
			// The aimed cases must fail; barrier, untouched by every fault,
			// must pass.
			ran := 0
			for _, tc := range commtest.Cases() {
				if tc.Name != "barrier" && !slices.Contains(tt.cases, tc.Name) {
					continue
				}
				ran++
				errs := runCase(comms, tc)
				switch {
				case tc.Name == "barrier" && len(errs) > 0:
					t.Errorf("barrier failed, though the fault is elsewhere: %v", errs)
				case tc.Name != "barrier" && len(errs) == 0:
					t.Errorf("case %s passed despite the fault", tc.Name)
				}
			}
			if ran != len(tt.cases)+1 {
				t.Errorf("ran %d cases, want %d: a name in the table is not a case", ran, len(tt.cases)+1)
			}
		})
	}
}

func runCase(comms []comm.Communicator, tc commtest.Case) []error {
	var out []error
	for _, err := range commtest.OnRanks(comms, tc.Run) {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
