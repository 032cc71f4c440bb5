package fault_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/runtime/comm/commtest"
	"github.com/gohorovod/gohorovod/runtime/comm/fault"
	"github.com/gohorovod/gohorovod/runtime/comm/memcomm"
	"github.com/gohorovod/gohorovod/tensor"
)

func wrapAll(group []comm.Communicator, rules func(r int) []fault.Rule) []*fault.Comm {
	out := make([]*fault.Comm, len(group))
	for r, c := range group {
		out[r] = fault.Wrap(c, rules(r)...)
	}
	return out
}

func ones(n int) []int {
	c := make([]int, n)
	for i := range c {
		c[i] = 1
	}
	return c
}

// call is one collective with values that depend on the rank. It returns
// the collective's error as is, or, when the call succeeded, what was wrong
// with the data, or, when it failed, whether it moved any data (a failed
// call must leave every buffer alone).
type call struct {
	kind fault.Kind
	do   func(c comm.Communicator) (callErr, bad error)
}

// unchanged reports a buffer that a failed call wrote to.
func unchanged(what string, got, want []float32) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s is %v after a failed call, want %v", what, got, want)
	}
	return nil
}

func expect(what string, got, want []float32) error {
	if !slices.Equal(got, want) {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

func filled(n int, f func(i int) float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = f(i)
	}
	return s
}

var calls = []call{
	{fault.Allreduce, func(c comm.Communicator) (error, error) {
		r, n := float32(c.Rank()), float32(c.Size())
		buf := []float32{r + 1, 2 * r}
		before := slices.Clone(buf)
		if err := c.Allreduce(tensor.FromFloat32(buf), tensor.Sum); err != nil {
			return err, unchanged("allreduce buffer", buf, before)
		}
		return nil, expect("allreduce", buf, []float32{n * (n + 1) / 2, n * (n - 1)})
	}},
	{fault.Allgatherv, func(c comm.Communicator) (error, error) {
		n := c.Size()
		recv := filled(n, func(int) float32 { return -1 })
		if err := c.Allgatherv(tensor.FromFloat32([]float32{float32(c.Rank() + 1)}), tensor.FromFloat32(recv), ones(n)); err != nil {
			return err, unchanged("allgatherv receive buffer", recv, filled(n, func(int) float32 { return -1 }))
		}
		return nil, expect("allgatherv", recv, filled(n, func(i int) float32 { return float32(i + 1) }))
	}},
	{fault.Gatherv, func(c comm.Communicator) (error, error) {
		n := c.Size()
		recv := filled(n, func(int) float32 { return -1 })
		if err := c.Gatherv(tensor.FromFloat32([]float32{float32(c.Rank() + 1)}), tensor.FromFloat32(recv), ones(n), n-1); err != nil {
			return err, unchanged("gatherv receive buffer", recv, filled(n, func(int) float32 { return -1 }))
		}
		want := filled(n, func(int) float32 { return -1 })
		if c.Rank() == n-1 {
			want = filled(n, func(i int) float32 { return float32(i + 1) })
		}
		return nil, expect("gatherv", recv, want)
	}},
	{fault.Bcast, func(c comm.Communicator) (error, error) {
		buf := filled(3, func(i int) float32 { return float32(10*c.Rank() + i) })
		before := slices.Clone(buf)
		if err := c.Bcast(tensor.FromFloat32(buf), 0); err != nil {
			return err, unchanged("bcast buffer", buf, before)
		}
		return nil, expect("bcast", buf, []float32{0, 1, 2})
	}},
	{fault.Alltoallv, func(c comm.Communicator) (error, error) {
		r, n := c.Rank(), c.Size()
		send := filled(n, func(d int) float32 { return float32(10*r + d) })
		recv := filled(n, func(int) float32 { return -1 })
		if err := c.Alltoallv(tensor.FromFloat32(send), ones(n), tensor.FromFloat32(recv), ones(n)); err != nil {
			return err, unchanged("alltoallv receive buffer", recv, filled(n, func(int) float32 { return -1 }))
		}
		return nil, expect("alltoallv", recv, filled(n, func(s int) float32 { return float32(10*s + r) }))
	}},
	{fault.ReduceScatter, func(c comm.Communicator) (error, error) {
		r, n := c.Rank(), c.Size()
		send := filled(n, func(i int) float32 { return float32(r + i) })
		recv := []float32{-1}
		if err := c.ReduceScatter(tensor.FromFloat32(send), tensor.FromFloat32(recv), ones(n), tensor.Sum); err != nil {
			return err, unchanged("reducescatter receive buffer", recv, []float32{-1})
		}
		return nil, expect("reducescatter", recv, []float32{float32(n*(n-1)/2 + n*r)})
	}},
	{fault.Barrier, func(c comm.Communicator) (error, error) { return c.Barrier(), nil }},
	{fault.Split, func(c comm.Communicator) (error, error) {
		r, n := c.Rank(), c.Size()
		sub, err := c.Split(0, -r)
		if err != nil {
			if sub != nil {
				return err, errors.New("a failed split returned a group")
			}
			return err, nil
		}
		defer sub.Close()
		if sub.Rank() != n-1-r || sub.Size() != n {
			return nil, fmt.Errorf("split: rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), n-1-r, n)
		}
		return nil, nil
	}},
	{fault.SplitLocal, func(c comm.Communicator) (error, error) {
		sub, err := c.SplitLocal()
		if err != nil {
			if sub != nil {
				return err, errors.New("a failed splitlocal returned a group")
			}
			return err, nil
		}
		defer sub.Close()
		if sub.Rank() != c.Rank() || sub.Size() != c.Size() {
			return nil, fmt.Errorf("splitlocal: rank %d of %d, want %d of %d", sub.Rank(), sub.Size(), c.Rank(), c.Size())
		}
		return nil, nil
	}},
	{fault.Exchange, func(c comm.Communicator) (error, error) {
		r, n := c.Rank(), c.Size()
		send := filled(3, func(i int) float32 { return float32(10*r + i) })
		recv := filled(3, func(int) float32 { return -1 })
		if err := comm.Exchange(c, tensor.FromFloat32(send), (r+1)%n, tensor.FromFloat32(recv), (r+n-1)%n); err != nil {
			return err, unchanged("exchange receive buffer", recv, filled(3, func(int) float32 { return -1 }))
		}
		s := (r + n - 1) % n
		return nil, expect("exchange", recv, filled(3, func(i int) float32 { return float32(10*s + i) }))
	}},
}

func callOf(k fault.Kind) call {
	for _, c := range calls {
		if c.kind == k {
			return c
		}
	}
	panic("no call of kind " + string(k))
}

func TestCallsCoverKinds(t *testing.T) {
	var got []fault.Kind
	for _, c := range calls {
		got = append(got, c.kind)
	}
	if !slices.Equal(got, fault.Kinds()) {
		t.Fatalf("test calls cover %v, want %v", got, fault.Kinds())
	}
}

// TestNthCallFails faults the k-th call of each kind on every rank (so that
// no rank waits for another): that call fails with the rule's error and
// moves no data, the others, and calls of other kinds in between, pass
// through with the right data, and Calls counts them all.
func TestNthCallFails(t *testing.T) {
	custom := errors.New("link down")
	for _, n := range []int{2, 3} {
		for _, cl := range calls {
			for _, k := range []int{1, 2, 3} {
				for _, err := range []error{nil, custom} {
					t.Run(fmt.Sprintf("n=%d/%s/call=%d/err=%v", n, cl.kind, k, err), func(t *testing.T) {
						testNthCall(t, n, cl, k, err)
					})
				}
			}
		}
	}
}

func testNthCall(t *testing.T, n int, cl call, k int, ruleErr error) {
	other := callOf(fault.Allreduce)
	if cl.kind == fault.Allreduce {
		other = callOf(fault.Barrier)
	}
	const rounds = 4
	group := memcomm.NewGroup(n)
	defer group[0].Close()
	comms := wrapAll(group, func(int) []fault.Rule { return []fault.Rule{{Kind: cl.kind, Call: k, Err: ruleErr}} })
	errs := commtest.OnRanks(comms, func(c *fault.Comm) error {
		var errs []error
		for i := 1; i <= rounds; i++ {
			callErr, bad := cl.do(c)
			if bad != nil {
				errs = append(errs, fmt.Errorf("call %d: %w", i, bad))
			}
			switch {
			case i != k && callErr != nil:
				errs = append(errs, fmt.Errorf("call %d: %v, want no fault", i, callErr))
			case i == k && ruleErr != nil && callErr != ruleErr:
				errs = append(errs, fmt.Errorf("call %d: %v, want the rule's error", i, callErr))
			case i == k && ruleErr == nil:
				var fe *fault.Error
				if !errors.As(callErr, &fe) || fe.Kind != cl.kind || fe.Call != k {
					errs = append(errs, fmt.Errorf("call %d: %v, want a *fault.Error for %s call %d", i, callErr, cl.kind, k))
				} else if s := callErr.Error(); !strings.Contains(s, string(cl.kind)) || !strings.Contains(s, fmt.Sprint(k)) {
					errs = append(errs, fmt.Errorf("%q names neither kind nor call", s))
				}
			}
			if callErr, bad := other.do(c); callErr != nil || bad != nil {
				errs = append(errs, fmt.Errorf("%s after call %d: %v", other.kind, i, errors.Join(callErr, bad)))
			}
		}
		if got := c.Calls(cl.kind); got != rounds {
			errs = append(errs, fmt.Errorf("Calls(%s) = %d, want %d", cl.kind, got, rounds))
		}
		if got := c.Calls(other.kind); got != rounds {
			errs = append(errs, fmt.Errorf("Calls(%s) = %d, want %d", other.kind, got, rounds))
		}
		if got := c.Calls(""); got != 2*rounds {
			errs = append(errs, fmt.Errorf(`Calls("") = %d, want %d`, got, 2*rounds))
		}
		return errors.Join(errs...)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestRuleMatching checks which calls a rule picks: Kind "" counts every
// collective, Call 0 faults every matching call, and the first matching
// rule decides.
func TestRuleMatching(t *testing.T) {
	first := errors.New("first rule")
	second := errors.New("second rule")
	seq := []fault.Kind{fault.Barrier, fault.Allreduce, fault.Barrier, fault.Bcast, fault.Allreduce, fault.Barrier}
	tests := []struct {
		name  string
		rules []fault.Rule
		want  []error // per call of seq: nil, or the error (nil in a rule's Err: any *fault.Error)
	}{
		{"no rules", nil, []error{nil, nil, nil, nil, nil, nil}},
		{"any kind, third call", []fault.Rule{{Call: 3, Err: first}}, []error{nil, nil, first, nil, nil, nil}},
		{"every barrier", []fault.Rule{{Kind: fault.Barrier, Err: first}}, []error{first, nil, first, nil, nil, first}},
		{"every call", []fault.Rule{{Err: first}}, []error{first, first, first, first, first, first}},
		{"first rule wins", []fault.Rule{{Kind: fault.Allreduce, Call: 2, Err: first}, {Kind: fault.Allreduce, Err: second}},
			[]error{nil, second, nil, nil, first, nil}},
		{"second barrier and every bcast", []fault.Rule{{Kind: fault.Barrier, Call: 2, Err: first}, {Kind: fault.Bcast, Err: second}},
			[]error{nil, nil, first, second, nil, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			group := memcomm.NewGroup(2)
			defer group[0].Close()
			comms := wrapAll(group, func(int) []fault.Rule { return tt.rules })
			for r, err := range commtest.OnRanks(comms, func(c *fault.Comm) error {
				var errs []error
				for i, k := range seq {
					got, bad := callOf(k).do(c)
					if bad != nil || got != tt.want[i] {
						errs = append(errs, fmt.Errorf("call %d (%s): %v, want %v", i+1, k, errors.Join(got, bad), tt.want[i]))
					}
				}
				return errors.Join(errs...)
			}) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestAbortRule fails the first call of each kind on one rank with Abort:
// the other ranks, blocked in that collective, get a *comm.PeerError naming
// the rank and the rule's error; the faulting rank gets the rule's error,
// and its own later calls an error matching ErrClosed.
func TestAbortRule(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, cl := range calls {
			for _, ruleErr := range []error{nil, errors.New("NCCL error: unhandled system error")} {
				t.Run(fmt.Sprintf("n=%d/%s/err=%v", n, cl.kind, ruleErr), func(t *testing.T) {
					failing := n - 1
					group := memcomm.NewGroup(n)
					comms := wrapAll(group, func(r int) []fault.Rule {
						if r != failing {
							return nil
						}
						return []fault.Rule{{Kind: cl.kind, Call: 1, Err: ruleErr, Abort: true}}
					})
					cause := fmt.Sprint(ruleErr)
					if ruleErr == nil {
						cause = (&fault.Error{Kind: cl.kind, Call: 1}).Error()
					}
					for r, err := range commtest.OnRanks(comms, func(c *fault.Comm) error {
						callErr, bad := cl.do(c)
						if bad != nil {
							return bad
						}
						if c.Rank() == failing {
							var fe *fault.Error
							if ruleErr != nil && callErr != ruleErr || ruleErr == nil && !errors.As(callErr, &fe) {
								return fmt.Errorf("faulting call: %v, want the rule's error", callErr)
							}
							if err := c.Barrier(); !errors.Is(err, comm.ErrClosed) || !strings.Contains(err.Error(), cause) {
								return fmt.Errorf("later call on the aborting rank: %v, want ErrClosed naming %q", err, cause)
							}
							return nil
						}
						for _, err := range []error{callErr, c.Barrier()} {
							var pe *comm.PeerError
							if !errors.As(err, &pe) || pe.Rank != failing || pe.Cause != cause || !errors.Is(err, comm.ErrClosed) {
								return fmt.Errorf("%v, want a *comm.PeerError naming rank %d and %q", err, failing, cause)
							}
						}
						return nil
					}) {
						if err != nil {
							t.Errorf("rank %d: %v", r, err)
						}
					}
				})
			}
		}
	}
}

// TestBlockRelease blocks one rank's first call of each kind until Release:
// no rank completes the collective before, and every rank completes it,
// with the right data, after.
func TestBlockRelease(t *testing.T) {
	for _, n := range []int{2, 3} {
		for _, cl := range calls {
			t.Run(fmt.Sprintf("n=%d/%s", n, cl.kind), func(t *testing.T) {
				const late = 0
				group := memcomm.NewGroup(n)
				defer group[0].Close()
				comms := wrapAll(group, func(r int) []fault.Rule {
					if r != late {
						return nil
					}
					return []fault.Rule{{Kind: cl.kind, Block: true, Err: errors.New("ignored with Block")}}
				})
				finished := make(chan int, n)
				var errs []error
				var mu sync.Mutex
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Go(func() {
						callErr, bad := cl.do(c)
						if err := errors.Join(callErr, bad); err != nil {
							mu.Lock()
							errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
							mu.Unlock()
						}
						finished <- r
					})
				}
				for comms[late].Calls(cl.kind) == 0 {
					time.Sleep(time.Millisecond)
				}
				// The late rank is in the wrapper and cannot enter the
				// collective before Release, so no rank can finish.
				select {
				case r := <-finished:
					t.Fatalf("rank %d finished the collective before Release", r)
				default:
				}
				comms[late].Release()
				wg.Wait()
				for _, err := range errs {
					t.Error(err)
				}
				// Released: a later call picked by the rule does not block.
				for r, err := range commtest.OnRanks(comms, func(c *fault.Comm) error {
					callErr, bad := cl.do(c)
					return errors.Join(callErr, bad)
				}) {
					if err != nil {
						t.Errorf("rank %d, after Release: %v", r, err)
					}
				}
			})
		}
	}
}

// TestBlockTeardown blocks one rank in an allreduce while the others wait
// for it inside the collective, and tears the group down in each way: the
// blocked rank returns the group's error too.
func TestBlockTeardown(t *testing.T) {
	cause := errors.New("host unreachable")
	tests := []struct {
		name     string
		opts     memcomm.GroupOptions
		teardown func(group []comm.Communicator, comms []*fault.Comm)
		check    func(r int, err error) error
	}{
		{"another rank aborts", memcomm.GroupOptions{}, func(group []comm.Communicator, _ []*fault.Comm) {
			group[1].(comm.Aborter).Abort(cause)
		}, func(r int, err error) error {
			if r == 1 {
				if !errors.Is(err, cause) || !errors.Is(err, comm.ErrClosed) {
					return fmt.Errorf("%v, want ErrClosed and the cause", err)
				}
				return nil
			}
			var pe *comm.PeerError
			if !errors.As(err, &pe) || pe.Rank != 1 || pe.Cause != cause.Error() {
				return fmt.Errorf("%v, want a *comm.PeerError naming rank 1", err)
			}
			return nil
		}},
		{"the blocked wrapper aborts", memcomm.GroupOptions{}, func(_ []comm.Communicator, comms []*fault.Comm) {
			comms[0].Abort(cause)
		}, func(r int, err error) error {
			var pe *comm.PeerError
			switch {
			case r == 0 && (!errors.Is(err, cause) || !errors.Is(err, comm.ErrClosed)):
				return fmt.Errorf("%v, want ErrClosed and the cause", err)
			case r != 0 && (!errors.As(err, &pe) || pe.Rank != 0):
				return fmt.Errorf("%v, want a *comm.PeerError naming rank 0", err)
			}
			return nil
		}},
		{"the blocked wrapper closes", memcomm.GroupOptions{}, func(_ []comm.Communicator, comms []*fault.Comm) {
			comms[0].Close()
		}, func(r int, err error) error {
			if err != comm.ErrClosed {
				return fmt.Errorf("%v, want ErrClosed", err)
			}
			return nil
		}},
		{"timeout", memcomm.GroupOptions{Timeout: 20 * time.Millisecond}, nil, func(r int, err error) error {
			var te *memcomm.TimeoutError
			if !errors.As(err, &te) || !slices.Equal(te.Missing, []int{0}) {
				return fmt.Errorf("%v, want a *memcomm.TimeoutError with rank 0 missing", err)
			}
			return nil
		}},
	}
	for _, n := range []int{2, 3} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("n=%d/%s", n, tt.name), func(t *testing.T) {
				group := memcomm.NewGroupWith(n, tt.opts)
				comms := wrapAll(group, func(r int) []fault.Rule {
					if r != 0 {
						return nil
					}
					return []fault.Rule{{Kind: fault.Allreduce, Block: true}}
				})
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Go(func() {
						callErr, bad := callOf(fault.Allreduce).do(c)
						errs[r] = callErr
						if bad != nil {
							errs[r] = fmt.Errorf("moved data: %w", bad)
						}
					})
				}
				for comms[0].Calls(fault.Allreduce) == 0 {
					time.Sleep(time.Millisecond)
				}
				if tt.teardown != nil {
					tt.teardown(group, comms)
				}
				wg.Wait()
				for r, err := range errs {
					if bad := tt.check(r, err); bad != nil {
						t.Errorf("rank %d: %v", r, bad)
					}
				}
			})
		}
	}
}

// TestPanic checks that a Panic rule panics with the rule's error (after
// aborting, with Abort) and moves no data, and that the communicator works
// afterwards when it was not aborted.
func TestPanic(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("n=%d/every-rank", n), func(t *testing.T) {
			group := memcomm.NewGroup(n)
			defer group[0].Close()
			comms := wrapAll(group, func(int) []fault.Rule { return []fault.Rule{{Kind: fault.Allreduce, Call: 1, Panic: true}} })
			for r, err := range commtest.OnRanks(comms, func(c *fault.Comm) (err error) {
				buf := []float32{1}
				func() {
					defer func() {
						p := recover()
						var fe *fault.Error
						if e, ok := p.(error); !ok || !errors.As(e, &fe) || fe.Kind != fault.Allreduce || fe.Call != 1 {
							err = fmt.Errorf("recovered %v, want a *fault.Error", p)
						}
					}()
					c.Allreduce(tensor.FromFloat32(buf), tensor.Sum)
				}()
				if buf[0] != 1 {
					return errors.New("the panicking call moved data")
				}
				if callErr, bad := callOf(fault.Allreduce).do(c); callErr != nil || bad != nil {
					return errors.Join(err, callErr, bad)
				}
				return err
			}) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
		t.Run(fmt.Sprintf("n=%d/with-abort", n), func(t *testing.T) {
			cause := errors.New("segfault in the reduction kernel")
			group := memcomm.NewGroup(n)
			comms := wrapAll(group, func(r int) []fault.Rule {
				if r != 1 {
					return nil
				}
				return []fault.Rule{{Kind: fault.Barrier, Err: cause, Abort: true, Panic: true}}
			})
			for r, err := range commtest.OnRanks(comms, func(c *fault.Comm) (err error) {
				defer func() {
					p := recover()
					if c.Rank() == 1 && p != cause {
						err = fmt.Errorf("recovered %v, want the rule's error", p)
					}
					if c.Rank() != 1 && p != nil {
						err = fmt.Errorf("panic on a healthy rank: %v", p)
					}
				}()
				err = c.Barrier()
				var pe *comm.PeerError
				if !errors.As(err, &pe) || pe.Rank != 1 || pe.Cause != cause.Error() {
					return fmt.Errorf("%v, want a *comm.PeerError naming rank 1", err)
				}
				return nil
			}) {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// TestCallsConcurrent reads Calls while the ranks run collectives, for the
// race detector, and checks the final counts.
func TestCallsConcurrent(t *testing.T) {
	group := memcomm.NewGroup(2)
	defer group[0].Close()
	comms := wrapAll(group, func(int) []fault.Rule { return nil })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				comms[0].Calls(fault.Barrier)
				comms[1].Calls("")
			}
		}
	})
	commtest.OnRanks(comms, func(c *fault.Comm) error {
		for range 100 {
			c.Barrier()
		}
		return nil
	})
	close(stop)
	wg.Wait()
	for r, c := range comms {
		if c.Calls(fault.Barrier) != 100 || c.Calls(fault.Allreduce) != 0 || c.Calls("") != 100 {
			t.Errorf("rank %d: %d barriers, %d allreduces, %d calls; want 100, 0, 100", r, c.Calls(fault.Barrier), c.Calls(fault.Allreduce), c.Calls(""))
		}
	}
}

// optional is a communicator with the optional methods a wrapper forwards.
type optional struct {
	comm.Communicator
	check, device, closed bool
}

func (o *optional) SetCheck(on bool)          { o.check = on }
func (o *optional) Check() bool               { return o.check }
func (o *optional) AcceptsDeviceMemory() bool { return o.device }
func (o *optional) Close() error              { o.closed = true; return o.Communicator.Close() }

// plain hides everything but comm.Communicator.
type plain struct{ comm.Communicator }

func TestForwarding(t *testing.T) {
	o := &optional{Communicator: memcomm.NewGroup(1)[0], device: true}
	w := fault.Wrap(o)
	w.SetCheck(true)
	if !o.check || !w.Check() || !w.AcceptsDeviceMemory() {
		t.Errorf("SetCheck, Check or AcceptsDeviceMemory not forwarded: %+v", o)
	}
	w.SetCheck(false)
	if o.check || w.Check() {
		t.Error("SetCheck(false) not forwarded")
	}
	// optional hides the group's Done and Abort: the wrapper's Done is
	// closed by its Abort, which closes the inner communicator.
	select {
	case <-w.Done():
		t.Error("Done closed before Abort")
	default:
	}
	if err := w.Abort(errors.New("x")); err != nil || !o.closed {
		t.Errorf("Abort on an inner without Abort: %v, closed %v; want it closed", err, o.closed)
	}
	select {
	case <-w.Done():
	default:
		t.Error("Done not closed by Abort")
	}

	p := fault.Wrap(plain{memcomm.NewGroup(1)[0]})
	if p.Check() || p.AcceptsDeviceMemory() {
		t.Error("a wrapper of a plain communicator claims the agreement check or device memory")
	}
	p.SetCheck(true)
	if p.Check() {
		t.Error("SetCheck on a plain communicator turned a check on")
	}
	if p.Rank() != 0 || p.Size() != 1 {
		t.Errorf("rank %d of %d, want 0 of 1", p.Rank(), p.Size())
	}
	p.Close()
	select {
	case <-p.Done():
	default:
		t.Error("Done of a wrapper without an inner Done is not closed by Close")
	}
	if err := p.Barrier(); !errors.Is(err, comm.ErrClosed) {
		t.Errorf("barrier after Close: %v, want ErrClosed", err)
	}
	if p.Calls(fault.Barrier) != 1 {
		t.Errorf("Calls(barrier) = %d after one barrier", p.Calls(fault.Barrier))
	}
}

func TestWrapPanics(t *testing.T) {
	for _, r := range []fault.Rule{{Kind: "allreduc"}, {Kind: fault.Bcast, Call: -1}} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.HasPrefix(fmt.Sprint(p), "fault: ") {
					t.Errorf("Wrap with %+v: recovered %v, want a fault: panic", r, p)
				}
			}()
			fault.Wrap(memcomm.NewGroup(1)[0], r)
		}()
	}
}

// TestConformance runs the conformance suite over wrappers without rules:
// they must behave exactly like the communicators they wrap.
func TestConformance(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			group := memcomm.NewGroup(n)
			comms := make([]comm.Communicator, n)
			for r, c := range group {
				comms[r] = fault.Wrap(c)
			}
			commtest.RunGroup(t, comms)
			comms[0].Close()
		})
	}
}
