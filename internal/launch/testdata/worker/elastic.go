package main

// The elastic mode of the test worker:
//
//	elastic [flags]  an elastic training job (optim/elastic): a float64
//	                 linear model trained with a DistributedOptimizer (SGD
//	                 with momentum, learning rate 0.01·size) on samples dealt
//	                 by an elastic Sampler, committing every step. It prints,
//	                 on standard output:
//	                   resume round=R epoch=E pos=P rank=K size=S t=NANOS
//	                     at every (re)start of the training function, after
//	                     the state was synced;
//	                   step round=R epoch=E pos=P rank=K size=S t=NANOS idx=I,J,...
//	                     before each step (P: the epoch's position before it);
//	                   stepped round=R epoch=E pos=P rank=K t=NANOS
//	                     after the step's update;
//	                   dying slot=H[L] t=NANOS  before killing (-die) or
//	                     stopping (-freeze) itself;
//	                   final w=BITS,...  rank 0, at the end (float64 bits, hex);
//	                   removed  when the job had no place for it any more.

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/optim"
	"github.com/gohorovod/gohorovod/optim/elastic"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/tensor"
)

// death is a -die entry: the worker of slot host[local] kills itself
// (SIGKILL) in the given round (1 unless said) before the step at epoch,
// position >= pos.
type death struct {
	slot              string
	epoch, pos, round int
	freeze            bool // -freeze: SIGSTOP instead of SIGKILL
}

func parseDeaths(s string) ([]death, error) {
	var out []death
	for _, d := range strings.Split(s, ",") {
		if d == "" {
			continue
		}
		f := strings.Split(d, ":")
		if len(f) == 4 {
			f = append(f, "1")
		}
		if len(f) != 5 {
			return nil, fmt.Errorf("-die %q: want host:local:epoch:pos[:round]", d)
		}
		e, err1 := strconv.Atoi(f[2])
		p, err2 := strconv.Atoi(f[3])
		r, err3 := strconv.Atoi(f[4])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("-die %q: epoch, position and round must be numbers", d)
		}
		out = append(out, death{slot: f[0] + "[" + f[1] + "]", epoch: e, pos: p, round: r})
	}
	return out, nil
}

// recorder is the Broadcaster of one rank alone that keeps what it
// "broadcasts": the bytes of every handler's Sync, in order.
type recorder struct{ got [][]byte }

func (r *recorder) BroadcastBytes(_ context.Context, b []byte, _ int) ([]byte, error) {
	r.got = append(r.got, append([]byte(nil), b...))
	return b, nil
}

// replayer gives back recorded bytes, in order.
type replayer struct{ got [][]byte }

func (r *replayer) BroadcastBytes(context.Context, []byte, int) ([]byte, error) {
	if len(r.got) == 0 {
		return nil, errors.New("replayer: nothing left")
	}
	b := r.got[0]
	r.got = r.got[1:]
	return b, nil
}

func sample(i, dim int) (x []float64, y float64) {
	x = make([]float64, dim)
	for j := range x {
		x[j] = math.Sin(0.1 * float64(i+1) * float64(j+1))
		y += (float64(j) - float64(dim)/2) * x[j]
	}
	return x, y
}

func elasticMain(args []string) int {
	fs := flag.NewFlagSet("elastic", flag.ContinueOnError)
	n := fs.Int("n", 96, "samples")
	batch := fs.Int("batch", 4, "batch per rank")
	epochs := fs.Int("epochs", 3, "epochs")
	dim := fs.Int("dim", 8, "model dimension")
	sleep := fs.Duration("sleep", 20*time.Millisecond, "pause per step")
	die := fs.String("die", "", "host:local:epoch:pos,... slots that kill themselves in round 1")
	freeze := fs.String("freeze", "", "host:local:epoch:pos,... slots that stop themselves (SIGSTOP) in round 1")
	dump := fs.String("dump", "", "rank 0 writes DIR/resume-ROUND.gob (the synced state) at each resume")
	load := fs.String("load", "", "start from a state written by -dump")
	failStart := fs.Int("fail-at-start", 0, "exit with this status before hvd.Init (0: do not)")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	deaths, err := parseDeaths(*die)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 64
	}
	freezes, err := parseDeaths(*freeze)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 64
	}
	for _, d := range freezes {
		d.freeze = true
		deaths = append(deaths, d)
	}
	slot := os.Getenv("HOROVOD_HOSTNAME") + "[" + os.Getenv("HOROVOD_LOCAL_RANK") + "]"
	if *failStart != 0 {
		fmt.Fprintf(os.Stderr, "worker %s: failing at start with %d\n", slot, *failStart)
		return *failStart
	}
	if err := hvd.Init(); err != nil {
		if errors.Is(err, hvd.ErrRemoved) {
			fmt.Println("removed")
			return 0
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	defer hvd.Shutdown()
	rt := hvd.Default()
	ctx := context.Background()

	w := make([]float64, *dim)
	p := optim.Param{Name: "w", Value: tensor.FromFloat64(w), Grad: tensor.FromFloat64(make([]float64, *dim))}
	sgd, err := optim.NewSGD([]optim.Param{p}, optim.SGDConfig{LR: 0.01 * float64(rt.Size()), Momentum: 0.9})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	coll, err := optim.FromRuntime(rt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	dopt, err := optim.NewDistributed(sgd, coll)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	defer dopt.Close()
	sampler, err := elastic.NewSampler(*n, *batch, 7, rt.Rank(), rt.Size())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	epoch := 0
	objs, _ := elastic.NewObjects(map[string]any{"epoch": &epoch})
	oh, _ := elastic.NewOptimizer(dopt)
	state, err := elastic.NewState(nil, elastic.Named("epoch", objs), elastic.Named("model", oh),
		elastic.Named("sampler", elastic.NewSamplerHandler(sampler)))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	state.RegisterResetCallback(func() error { sgd.SetLR(0.01 * float64(rt.Size())); return nil })
	if *load != "" {
		var rec [][]byte
		b, err := os.ReadFile(*load)
		if err == nil {
			err = gob.NewDecoder(bytes.NewReader(b)).Decode(&rec)
		}
		if err == nil {
			state.SetBroadcaster(&replayer{got: rec})
			err = state.Sync(ctx)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker: -load:", err)
			return 70
		}
	}

	train := func(ctx context.Context) error {
		round := rt.ElasticRound()
		fmt.Printf("resume round=%d epoch=%d pos=%d rank=%d size=%d t=%d\n",
			round, epoch, sampler.Processed(), rt.Rank(), rt.Size(), time.Now().UnixNano())
		if *dump != "" && rt.Rank() == 0 {
			rec := &recorder{}
			state.SetBroadcaster(rec)
			err := state.Sync(ctx) // alone: records the synced values
			state.SetBroadcaster(elastic.FromRuntime(rt))
			var buf bytes.Buffer
			if err == nil {
				err = gob.NewEncoder(&buf).Encode(rec.got)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(*dump, fmt.Sprintf("resume-%d.gob", round)), buf.Bytes(), 0o644)
			}
			if err != nil {
				return fmt.Errorf("-dump: %w", err)
			}
		}
		for epoch < *epochs {
			if sampler.Epoch() != epoch {
				sampler.SetEpoch(epoch)
			}
			for _, b := range sampler.Batches() {
				pos := sampler.Processed()
				for _, d := range deaths {
					if round == d.round && d.slot == slot && epoch == d.epoch && pos >= d.pos {
						fmt.Printf("dying slot=%s t=%d\n", slot, time.Now().UnixNano())
						sig := syscall.SIGKILL
						if d.freeze {
							sig = syscall.SIGSTOP
						}
						_ = syscall.Kill(os.Getpid(), sig)
						time.Sleep(time.Minute)
					}
				}
				idx := make([]string, len(b))
				for k, i := range b {
					idx[k] = strconv.Itoa(i)
				}
				fmt.Printf("step round=%d epoch=%d pos=%d rank=%d size=%d t=%d idx=%s\n",
					round, epoch, pos, rt.Rank(), rt.Size(), time.Now().UnixNano(), strings.Join(idx, ","))
				if err := dopt.ZeroGrad(); err != nil {
					return err
				}
				g := p.Grad.Float64s()
				wv := p.Value.Float64s()
				for _, i := range b {
					x, y := sample(i, *dim)
					pred := 0.0
					for j := range x {
						pred += wv[j] * x[j]
					}
					for j := range x {
						g[j] += (pred - y) * x[j] / float64(*batch)
					}
				}
				if err := dopt.Step(); err != nil {
					return err
				}
				fmt.Printf("stepped round=%d epoch=%d pos=%d rank=%d t=%d\n", round, epoch, pos, rt.Rank(), time.Now().UnixNano())
				sampler.Record()
				time.Sleep(*sleep)
				if err := state.Commit(); err != nil {
					return err
				}
			}
			epoch++
			sampler.SetEpoch(epoch)
			if err := state.Commit(); err != nil {
				return err
			}
		}
		return nil
	}
	err = elastic.Run(ctx, state, train, elastic.WithLogf(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }))
	switch {
	case errors.Is(err, elastic.ErrRemoved):
		fmt.Println("removed")
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 71
	}
	if rt.Rank() == 0 {
		bits := make([]string, len(p.Value.Float64s()))
		for j, v := range p.Value.Float64s() {
			bits[j] = strconv.FormatUint(math.Float64bits(v), 16)
		}
		fmt.Printf("final w=%s\n", strings.Join(bits, ","))
	}
	return 0
}
