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

// elasticFlags are the elastic mode's flags.
type elasticFlags struct {
	n, batch, epochs, dim int
	sleep                 time.Duration
	deaths                []death // -die and -freeze
	dump, load            string
	failStart             int
}

// parseElastic parses the elastic mode's flags.
func parseElastic(args []string) (elasticFlags, error) {
	var f elasticFlags
	fs := flag.NewFlagSet("elastic", flag.ContinueOnError)
	fs.IntVar(&f.n, "n", 96, "samples")
	fs.IntVar(&f.batch, "batch", 4, "batch per rank")
	fs.IntVar(&f.epochs, "epochs", 3, "epochs")
	fs.IntVar(&f.dim, "dim", 8, "model dimension")
	fs.DurationVar(&f.sleep, "sleep", 20*time.Millisecond, "pause per step")
	die := fs.String("die", "", "host:local:epoch:pos,... slots that kill themselves in round 1")
	freeze := fs.String("freeze", "", "host:local:epoch:pos,... slots that stop themselves (SIGSTOP) in round 1")
	fs.StringVar(&f.dump, "dump", "", "rank 0 writes DIR/resume-ROUND.gob (the synced state) at each resume")
	fs.StringVar(&f.load, "load", "", "start from a state written by -dump")
	fs.IntVar(&f.failStart, "fail-at-start", 0, "exit with this status before hvd.Init (0: do not)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	deaths, err := parseDeaths(*die)
	if err != nil {
		return f, err
	}
	freezes, err := parseDeaths(*freeze)
	if err != nil {
		return f, err
	}
	for _, d := range freezes {
		d.freeze = true
		deaths = append(deaths, d)
	}
	f.deaths = deaths
	return f, nil
}

// elasticWorker is one worker of the elastic mode: its model, optimizer,
// sampler and elastic state.
type elasticWorker struct {
	elasticFlags
	rt      *hvd.Runtime
	slot    string // host[local]
	p       optim.Param
	sgd     *optim.SGD
	dopt    *optim.DistributedOptimizer
	sampler *elastic.Sampler
	state   *elastic.State
	epoch   int
}

func elasticMain(args []string) int {
	f, err := parseElastic(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 64
	}
	slot := os.Getenv("HOROVOD_HOSTNAME") + "[" + os.Getenv("HOROVOD_LOCAL_RANK") + "]"
	if f.failStart != 0 {
		fmt.Fprintf(os.Stderr, "worker %s: failing at start with %d\n", slot, f.failStart)
		return f.failStart
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
	w := &elasticWorker{elasticFlags: f, rt: hvd.Default(), slot: slot}
	if err := w.setUp(); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 70
	}
	defer w.dopt.Close()
	err = elastic.Run(context.Background(), w.state, w.train, elastic.WithLogf(func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }))
	switch {
	case errors.Is(err, elastic.ErrRemoved):
		fmt.Println("removed")
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 71
	}
	if w.rt.Rank() == 0 {
		bits := make([]string, len(w.p.Value.Float64s()))
		for j, v := range w.p.Value.Float64s() {
			bits[j] = strconv.FormatUint(math.Float64bits(v), 16)
		}
		fmt.Printf("final w=%s\n", strings.Join(bits, ","))
	}
	return 0
}

// setUp makes the model, the optimizers, the sampler and the elastic
// state, and loads -load's state into it.
func (w *elasticWorker) setUp() error {
	rt := w.rt
	w.p = optim.Param{Name: "w", Value: tensor.FromFloat64(make([]float64, w.dim)), Grad: tensor.FromFloat64(make([]float64, w.dim))}
	var err error
	if w.sgd, err = optim.NewSGD([]optim.Param{w.p}, optim.SGDConfig{LR: 0.01 * float64(rt.Size()), Momentum: 0.9}); err != nil {
		return err
	}
	coll, err := optim.FromRuntime(rt)
	if err != nil {
		return err
	}
	if w.dopt, err = optim.NewDistributed(w.sgd, coll); err != nil {
		return err
	}
	if w.sampler, err = elastic.NewSampler(w.n, w.batch, 7, rt.Rank(), rt.Size()); err != nil {
		w.dopt.Close()
		return err
	}
	objs, _ := elastic.NewObjects(map[string]any{"epoch": &w.epoch})
	oh, _ := elastic.NewOptimizer(w.dopt)
	w.state, err = elastic.NewState(nil, elastic.Named("epoch", objs), elastic.Named("model", oh),
		elastic.Named("sampler", elastic.NewSamplerHandler(w.sampler)))
	if err != nil {
		w.dopt.Close()
		return err
	}
	w.state.RegisterResetCallback(func() error { w.sgd.SetLR(0.01 * float64(rt.Size())); return nil })
	if w.load == "" {
		return nil
	}
	var rec [][]byte
	b, err := os.ReadFile(w.load)
	if err == nil {
		err = gob.NewDecoder(bytes.NewReader(b)).Decode(&rec)
	}
	if err == nil {
		w.state.SetBroadcaster(&replayer{got: rec})
		err = w.state.Sync(context.Background())
	}
	if err != nil {
		w.dopt.Close()
		return fmt.Errorf("-load: %w", err)
	}
	return nil
}

// train is the elastic training function: it prints the resume, writes
// -dump's record, then trains the remaining epochs, committing every
// step.
func (w *elasticWorker) train(ctx context.Context) error {
	round := w.rt.ElasticRound()
	fmt.Printf("resume round=%d epoch=%d pos=%d rank=%d size=%d t=%d\n",
		round, w.epoch, w.sampler.Processed(), w.rt.Rank(), w.rt.Size(), time.Now().UnixNano())
	if w.dump != "" && w.rt.Rank() == 0 {
		if err := w.dumpState(ctx, round); err != nil {
			return fmt.Errorf("-dump: %w", err)
		}
	}
	for w.epoch < w.epochs {
		if w.sampler.Epoch() != w.epoch {
			w.sampler.SetEpoch(w.epoch)
		}
		for _, b := range w.sampler.Batches() {
			if err := w.step(round, b); err != nil {
				return err
			}
		}
		w.epoch++
		w.sampler.SetEpoch(w.epoch)
		if err := w.state.Commit(); err != nil {
			return err
		}
	}
	return nil
}

// dumpState writes DIR/resume-ROUND.gob: the synced values, recorded by
// syncing rank 0 alone.
func (w *elasticWorker) dumpState(ctx context.Context, round int) error {
	rec := &recorder{}
	w.state.SetBroadcaster(rec)
	err := w.state.Sync(ctx) // alone: records the synced values
	w.state.SetBroadcaster(elastic.FromRuntime(w.rt))
	var buf bytes.Buffer
	if err == nil {
		err = gob.NewEncoder(&buf).Encode(rec.got)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(w.dump, fmt.Sprintf("resume-%d.gob", round)), buf.Bytes(), 0o644)
	}
	return err
}

// step trains one batch b and commits, first dying or freezing where
// -die or -freeze says so.
func (w *elasticWorker) step(round int, b []int) error {
	pos := w.sampler.Processed()
	for _, d := range w.deaths {
		if round == d.round && d.slot == w.slot && w.epoch == d.epoch && pos >= d.pos {
			fmt.Printf("dying slot=%s t=%d\n", w.slot, time.Now().UnixNano())
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
		round, w.epoch, pos, w.rt.Rank(), w.rt.Size(), time.Now().UnixNano(), strings.Join(idx, ","))
	if err := w.dopt.ZeroGrad(); err != nil {
		return err
	}
	g, wv := w.p.Grad.Float64s(), w.p.Value.Float64s()
	for _, i := range b {
		x, y := sample(i, w.dim)
		pred := 0.0
		for j := range x {
			pred += wv[j] * x[j]
		}
		for j := range x {
			g[j] += (pred - y) * x[j] / float64(w.batch)
		}
	}
	if err := w.dopt.Step(); err != nil {
		return err
	}
	fmt.Printf("stepped round=%d epoch=%d pos=%d rank=%d t=%d\n", round, w.epoch, pos, w.rt.Rank(), time.Now().UnixNano())
	w.sampler.Record()
	time.Sleep(w.sleep)
	return w.state.Commit()
}
