package runtime

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/runtime/comm"
	"github.com/gohorovod/gohorovod/tensor"
)

// patientComm is a communicator that can wait patiently
// (comm.PatientAllreducer): it counts those calls and the longest sleep
// asked for, and reduces as Allreduce does.
type patientComm struct {
	comm.Communicator
	calls    atomic.Int64
	maxSleep atomic.Int64
}

func (p *patientComm) AllreducePatient(buf *tensor.Tensor, op tensor.ReduceOp, maxSleep time.Duration) error {
	p.calls.Add(1)
	p.maxSleep.Store(int64(maxSleep))
	return p.Communicator.Allreduce(buf, op)
}

// TestAgreementWaitsPatiently: over a communicator that can wait
// patiently, every cycle's agreement allreduce goes through it, with the
// configured longest sleep, and the sums are right; with
// AgreementSleepMax 0 the loop makes the blocking call.
func TestAgreementWaitsPatiently(t *testing.T) {
	for _, sleep := range []time.Duration{200 * time.Microsecond, 0} {
		const n = 2
		cfg := testConfig()
		cfg.AgreementSleepMax = sleep
		rts, coms := startWrapped(t, n, cfg, func(c comm.Communicator) *patientComm { return &patientComm{Communicator: c} })
		errs := sumSteps(t, rts, 5)
		StopLocal(rts)
		for i, c := range coms {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			calls := c.calls.Load()
			switch {
			case sleep > 0 && (calls < 5 || time.Duration(c.maxSleep.Load()) != sleep):
				t.Errorf("rank %d: %d patient agreements with longest sleep %v, want one a cycle with %v",
					i, calls, time.Duration(c.maxSleep.Load()), sleep)
			case sleep == 0 && calls != 0:
				t.Errorf("rank %d: %d patient agreements with AgreementSleepMax 0", i, calls)
			}
		}
	}
}

// sumSteps runs steps allreduces (Sum) of one element under one name on
// every rank at once, rank i giving i+step, checks each sum, and returns
// each rank's last error.
func sumSteps(t *testing.T, rts []*Runtime, steps int) []error {
	t.Helper()
	n := len(rts)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for step := range steps {
				out, err := rts[i].Allreduce(ctx, tensor.FromFloat64([]float64{float64(i + step)}), "g", Sum)
				if want := float64(n*(n-1)/2 + n*step); err == nil && out.Float64s()[0] != want {
					t.Errorf("rank %d step %d: sum %v, want %v", i, step, out.Float64s()[0], want)
				}
				errs[i] = err
			}
		}()
	}
	wg.Wait()
	return errs
}

// bellComm is a patient communicator with a doorbell (comm.Doorbeller)
// that counts EnableDoorbell's calls, or fails them.
type bellComm struct {
	patientComm
	enabled atomic.Int64
	fail    error
}

func (b *bellComm) EnableDoorbell() error {
	b.enabled.Add(1)
	return b.fail
}

// TestDoorbellEnabledAtInit: Init sets the node's doorbell up once, on
// every rank, when AgreementDoorbell is on and the agreement is patient;
// not with the knob off nor with AgreementSleepMax 0. A doorbell that
// fails leaves the job running, its agreements patient on their timers.
func TestDoorbellEnabledAtInit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bell  bool
		sleep time.Duration
		fail  error
		want  int64
	}{
		{"on", true, 200 * time.Microsecond, nil, 1},
		{"off", false, 200 * time.Microsecond, nil, 0},
		{"blocking agreement", true, 0, nil, 0},
		{"failing", true, 200 * time.Microsecond, errors.New("no shared memory"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 2
			cfg := testConfig()
			cfg.AgreementDoorbell, cfg.AgreementSleepMax = tc.bell, tc.sleep
			rts, coms := startWrapped(t, n, cfg, func(c comm.Communicator) *bellComm {
				return &bellComm{patientComm: patientComm{Communicator: c}, fail: tc.fail}
			})
			for i, err := range sumSteps(t, rts, 1) {
				if err != nil {
					t.Errorf("rank %d: %v", i, err)
				}
			}
			StopLocal(rts)
			for i, c := range coms {
				if got := c.enabled.Load(); got != tc.want {
					t.Errorf("rank %d: EnableDoorbell called %d times, want %d", i, got, tc.want)
				}
			}
		})
	}
}
