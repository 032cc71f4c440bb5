// Command worker is the program the end-to-end tests launch through
// gohorovodrun. It learns its rank from the MPI launcher's variables
// (Open MPI's OMPI_COMM_WORLD_*, Hydra's PMI_*) or from gohorovodrun
// --gloo's (HOROVOD_RANK, HOROVOD_SIZE) and does what its first argument
// says:
//
//	env            print "rank R size S" and the knobs it read with config.FromEnv
//	rdzv           join the rendezvous (internal/job/rendezvous, no transport) and
//	               print the assignment: "rank R size S local L/LS cross C/CS
//	               members host:lr:data,..."
//	rdzv-hang DIR SKIP  as rdzv, then write DIR/<rank>.pid, print "ready R" and
//	               wait to be stopped; rank SKIP never joins (it writes its pid
//	               and waits)
//	fail R CODE DIR  the others write DIR/<rank>.pid and wait to be stopped;
//	                 rank R waits for their files, then exits with CODE
//	hang DIR       write DIR/<rank>.pid, print "ready R", wait to be stopped
//	train DIR      a training loop under the runtime (-tags mpi): hvd.Init,
//	               write DIR/<rank>.pid, allreduce a gradient step after step,
//	               print "training R pid P" after the first steps; gives up
//	               (exit 6) after two minutes so that a broken test leaves
//	               nothing running for long
//	preempt DIR [STEPS]  as train, but stops when told to (optim/preempt):
//	               every rank writes DIR/<rank>.ckpt with the step it stopped
//	               after, prints "rank R preempted after step S" and exits
//	               with 99; started again, it resumes after that step; with
//	               STEPS, it ends after step STEPS-1 ("rank R finished at
//	               step S", exit 0)
//	sleepy SECS    hvd.Init with a deferred hvd.Shutdown; rank 1 sleeps SECS
//	               in user code before its allreduce while the others wait
//	               in theirs (exit 3 on ErrShutdown)
//	elastic [flags]  an elastic training job (elastic.go)
//	fail-first     as hvd-allreduce, except that on the first attempt of a
//	               torchrun job (TORCHELASTIC_RESTART_COUNT=0) rank 1 exits
//	               with 9 after hvd.Init, so that torchrun restarts the job
package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"context"
	"errors"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
	"github.com/gohorovod/gohorovod/mpi"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/tensor"
)

func env(keys ...string) int {
	for _, k := range keys {
		if v, err := strconv.Atoi(os.Getenv(k)); err == nil {
			return v
		}
	}
	return -1
}

func main() {
	rank := env("OMPI_COMM_WORLD_RANK", "PMI_RANK", "HOROVOD_RANK")
	size := env("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "HOROVOD_SIZE")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "worker: want env, fail or hang")
		os.Exit(64)
	}
	switch os.Args[1] {
	case "env":
		c, err := config.FromEnv(os.LookupEnv)
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: %v\n", rank, err)
			os.Exit(65)
		}
		fmt.Printf("rank %d size %d %s\n", rank, size, strings.Join(c.Environ(), " "))
	case "fail":
		failMode(rank, size)
	case "allreduce":
		if err := allreduce(); err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: %v\n", rank, err)
			os.Exit(67)
		}
	case "stall":
		os.Exit(stall())
	case "sleepy":
		secs, _ := strconv.Atoi(os.Args[2])
		os.Exit(sleepy(time.Duration(secs) * time.Second))
	case "mpifail":
		bad, _ := strconv.Atoi(os.Args[2])
		code, _ := strconv.Atoi(os.Args[3])
		if err := mpiFail(bad, code); err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: %v\n", rank, err)
			os.Exit(67)
		}
	case "hvd-allreduce":
		os.Exit(hvdAllreduce())
	case "fail-first":
		os.Exit(failFirst())
	case "rdzv-server":
		os.Exit(rdzvServer(os.Args[2], os.Args[3], os.Args[4]))
	case "train-exchange":
		os.Exit(trainExchange(os.Args[2]))
	case "train":
		os.Exit(train(os.Args[2]))
	case "preempt":
		steps := 0
		if len(os.Args) > 3 {
			steps, _ = strconv.Atoi(os.Args[3])
		}
		os.Exit(preemptible(os.Args[2], steps))
	case "train-steps":
		steps, _ := strconv.Atoi(os.Args[2])
		pause, _ := time.ParseDuration(os.Args[3])
		elems, _ := strconv.Atoi(os.Args[4])
		os.Exit(trainSteps(steps, pause, elems))
	case "rdzv":
		os.Exit(joinRendezvous(rank))
	case "rdzv-hang":
		rdzvHang(rank)
	case "elastic":
		os.Exit(elasticMain(os.Args[2:]))
	case "hang":
		writePID(os.Args[2], rank)
		fmt.Printf("ready %d\n", rank)
		time.Sleep(time.Minute)
	}
}

// failMode is "fail BAD CODE DIR": rank BAD exits with CODE once every
// other rank has written its pid to DIR; the others sleep.
func failMode(rank, size int) {
	bad, _ := strconv.Atoi(os.Args[2])
	code, _ := strconv.Atoi(os.Args[3])
	if rank == bad {
		waitForPIDs(os.Args[4], size-1)
		fmt.Fprintf(os.Stderr, "worker %d: failing with %d\n", rank, code)
		os.Exit(code)
	}
	writePID(os.Args[4], rank)
	time.Sleep(time.Minute)
}

// failFirst is "fail-first": on torchrun's first attempt rank 1 fails and
// rank 0 waits in a collective until torchrun stops it; on a restart, an
// allreduce as hvd-allreduce.
func failFirst() int {
	if os.Getenv("TORCHELASTIC_RESTART_COUNT") != "0" {
		return hvdAllreduce()
	}
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	if hvd.Rank() == 1 {
		fmt.Fprintln(os.Stderr, "worker 1: failing on the first attempt")
		return 9
	}
	hvd.Allreduce(context.Background(), tensor.FromFloat32([]float32{1}), "wait", hvd.Sum)
	return 3
}

// rdzvHang is "rdzv-hang DIR SKIP": every rank but SKIP joins the
// rendezvous; then each writes its pid to DIR, says it is ready and
// sleeps.
func rdzvHang(rank int) {
	skip, _ := strconv.Atoi(os.Args[3])
	if rank != skip {
		if code := joinRendezvous(rank); code != 0 {
			os.Exit(code)
		}
	}
	writePID(os.Args[2], rank)
	fmt.Printf("ready %d\n", rank)
	time.Sleep(time.Minute)
}

func writePID(dir string, rank int) {
	p := filepath.Join(dir, strconv.Itoa(rank)+".pid")
	if err := os.WriteFile(p, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(66)
	}
}

// waitForPIDs waits (at most 30 s) until n pid files are in dir, so that
// the failing rank fails while the others are running.
func waitForPIDs(dir string, n int) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		m, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
		if len(m) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func allreduce() error {
	if err := mpi.Init(); err != nil {
		return err
	}
	w, err := mpi.World()
	if err != nil {
		return err
	}
	t := tensor.FromFloat32([]float32{float32(w.Rank() + 1)})
	if err := w.Allreduce(t, tensor.Sum); err != nil {
		return err
	}
	fmt.Printf("rank %d size %d sum %g\n", w.Rank(), w.Size(), tensor.View[float32](t)[0])
	return mpi.Finalize()
}

func mpiFail(bad, code int) error {
	if err := mpi.Init(); err != nil {
		return err
	}
	w, err := mpi.World()
	if err != nil {
		return err
	}
	if err := w.Barrier(); err != nil { // everyone is up
		return err
	}
	if w.Rank() == bad {
		fmt.Fprintf(os.Stderr, "worker %d: failing with %d\n", w.Rank(), code)
		os.Exit(code)
	}
	return w.Barrier() // never completes: rank bad is gone
}

func stall() int {
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	r := hvd.Rank()
	name := "y"
	if r == 0 {
		name = "x"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := hvd.Allreduce(ctx, tensor.FromFloat32([]float32{1}), name, hvd.Sum)
	fmt.Fprintf(os.Stderr, "worker %d: allreduce %s: %v\n", r, name, err)
	switch {
	case errors.Is(err, hvd.ErrShutdown):
		return 3
	case ctx.Err() != nil:
		return 5
	}
	return 4
}

func sleepy(d time.Duration) int {
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	defer hvd.Shutdown()
	r := hvd.Rank()
	if r == 1 {
		time.Sleep(d)
	}
	_, err := hvd.Allreduce(context.Background(), tensor.FromFloat32([]float32{1}), "y", hvd.Sum)
	fmt.Fprintf(os.Stderr, "worker %d: allreduce y: %v\n", r, err)
	if errors.Is(err, hvd.ErrShutdown) {
		return 3
	}
	if err != nil {
		return 4
	}
	return 0
}

func train(dir string) int { return trainWith(dir, allreduceStep(1<<12), nil) }

// allreduceStep is a step of train: an allreduce (Average) of elems
// float32s.
func allreduceStep(elems int) func(ctx context.Context, r, step int) error {
	grad := make([]float32, elems)
	return func(ctx context.Context, r, step int) error {
		for i := range grad {
			grad[i] = float32(r + step)
		}
		_, err := hvd.Allreduce(ctx, tensor.FromFloat32(grad), "grad", hvd.Average)
		return err
	}
}

// trainExchange trains as train does with a ring shift of the weights
// (hvd.Exchange, decentralized SGD's point-to-point exchange) instead of
// an allreduce at each step.
func trainExchange(dir string) int {
	w := make([]float32, 1<<12)
	return trainWith(dir, func(ctx context.Context, r, step int) error {
		n := hvd.Size()
		for i := range w {
			w[i] = float32(r + step)
		}
		_, err := hvd.Exchange(ctx, tensor.FromFloat32(w), (r+1)%n, (r+n-1)%n, "weights")
		return err
	}, nil)
}

// trainWith runs step until it fails or two minutes pass, writing this
// rank's pid to dir and printing "training RANK pid PID" at step 10. When
// start is given, it is called once after Init; its after runs after
// every step and ends the loop with an exit status when it says so (a nil
// after: exit at once with code).
func trainWith(dir string, step func(ctx context.Context, r, step int) error, start func(r int) (after func(step int) (code int, end bool), code int)) int {
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	r := hvd.Rank()
	writePID(dir, r)
	var after func(int) (int, bool)
	if start != nil {
		var code int
		if after, code = start(r); after == nil {
			return code
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for s := 0; ctx.Err() == nil; s++ {
		if err := step(ctx, r, s); err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: step %d: %v\n", r, s, err)
			return 3
		}
		if s == 10 {
			fmt.Printf("training %d pid %d\n", r, os.Getpid())
		}
		if after != nil {
			if code, end := after(s); end {
				return code
			}
		}
	}
	fmt.Fprintf(os.Stderr, "worker %d: still training after two minutes\n", r)
	return 6
}

// trainSteps makes steps allreduces (Average) of elems float32s, pausing
// between them, checks every element of every result, and prints
// "trained N steps" on rank 0: a job that must finish, and finish right,
// across a network that misbehaves.
func trainSteps(steps int, pause time.Duration, elems int) int {
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	defer hvd.Shutdown()
	r, n := hvd.Rank(), hvd.Size()
	grad := make([]float32, elems)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for step := 0; step < steps; step++ {
		for i := range grad {
			grad[i] = float32(r + step + i%7)
		}
		out, err := hvd.Allreduce(ctx, tensor.FromFloat32(grad), "grad", hvd.Average)
		if err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: step %d: %v\n", r, step, err)
			return 3
		}
		got := out.Float32s()
		for i, v := range got {
			if want := float32(n-1)/2 + float32(step+i%7); v != want {
				fmt.Fprintf(os.Stderr, "worker %d: step %d: element %d is %v, want %v\n", r, step, i, v, want)
				return 5
			}
		}
		if step == 5 {
			fmt.Printf("training %d pid %d\n", r, os.Getpid())
		}
		time.Sleep(pause)
	}
	if r == 0 {
		fmt.Printf("trained %d steps\n", steps)
	}
	return 0
}

// joinRendezvous joins the job's rendezvous as the environment says and
// prints the assignment.
func joinRendezvous(rank int) int {
	c, err := config.FromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", rank, err)
		return 65
	}
	key, err := c.Secret.Bytes()
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %s: %v\n", rank, config.EnvSecret, err)
		return 65
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.GlooTimeout)
	defer cancel()
	me := rendezvous.Member{Slot: rendezvous.Slot{Host: c.Hostname, LocalRank: c.LocalRank}, Data: fmt.Sprintf("pid%d", os.Getpid())}
	a, err := rendezvous.Join(ctx, c.RendezvousAddress(), key, me)
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", rank, err)
		return 68
	}
	if err := a.Check(c.Rank, c.Size, c.LocalRank, c.LocalSize, c.CrossRank, c.CrossSize); err != nil {
		fmt.Fprintf(os.Stderr, "worker %d: %v\n", rank, err)
		return 69
	}
	var ms []string
	for _, m := range a.Members {
		ms = append(ms, fmt.Sprintf("%s:%d:%s", m.Host, m.LocalRank, m.Data))
	}
	fmt.Printf("rank %d size %d local %d/%d cross %d/%d members %s\n", a.Rank, a.Size, a.LocalRank, a.LocalSize,
		a.CrossRank, a.CrossSize, strings.Join(ms, ","))
	return 0
}

// hvdAllreduce initialises the runtime from the environment (MPI, or the
// embedded transport under gohorovodrun --gloo or a hand-made rendezvous),
// reduces a small and a 1 MiB tensor, and prints its placement and sums.
func hvdAllreduce() int {
	if err := hvd.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "worker: hvd.Init: %v\n", err)
		return 4
	}
	defer hvd.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := hvd.Rank()
	small := tensor.FromFloat32([]float32{float32(r + 1)})
	big := tensor.New(tensor.Float32, 1<<18)
	for i := range big.Float32s() {
		big.Float32s()[i] = float32(r + 1)
	}
	for _, t := range []*tensor.Tensor{small, big} {
		if err := hvd.AllreduceInPlace(ctx, t, fmt.Sprint("x", t.Len()), hvd.Sum); err != nil {
			fmt.Fprintf(os.Stderr, "worker %d: allreduce: %v\n", r, err)
			return 5
		}
	}
	fmt.Printf("rank %d size %d local %d/%d cross %d/%d sum %g %g\n", r, hvd.Size(), hvd.LocalRank(), hvd.LocalSize(),
		hvd.CrossRank(), hvd.CrossSize(), small.Float32s()[0], big.Float32s()[1<<18-1])
	return 0
}

// rdzvServer serves a rendezvous for slots ("host:localrank,...") on
// listen with the hex secret until every slot has joined (or a minute).
func rdzvServer(listen, secret, slots string) int {
	key, err := config.Secret(secret).Bytes()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdzv-server:", err)
		return 2
	}
	var expect []rendezvous.Slot
	for _, s := range strings.Split(slots, ",") {
		i := strings.LastIndex(s, ":")
		lr, _ := strconv.Atoi(s[i+1:])
		expect = append(expect, rendezvous.Slot{Host: s[:i], LocalRank: lr})
	}
	srv, err := rendezvous.NewServer(key, expect)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdzv-server:", err)
		return 2
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdzv-server:", err)
		return 2
	}
	go srv.Serve(ln)
	fmt.Println("listening", ln.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = srv.Wait(ctx)
	time.Sleep(time.Second) // let the answers go out
	srv.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdzv-server:", err)
		return 3
	}
	return 0
}
