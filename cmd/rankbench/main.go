package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/internal/emucluster"
)

// opts are the benchmark's settings.
type opts struct {
	bin, program   string // absolute paths
	nps            []int
	transports     []string
	args           []string // the program's
	timeout        time.Duration
	minAvail       int64
	yardIters      int
	yardstick      string // compiled, absolute; "" for none
	emuNodes       int
	cluster        *emucluster.Cluster
	secret         string
	strict, noYard bool
}

// defaultArgs are the program's arguments before those after "--": the
// tiny model, no compute, few steps, the probe, the per-rank report.
var defaultArgs = []string{"--model", "tiny40", "--compute-ms", "0", "--part-steps", "0", "--warmup", "5",
	"--batches-per-iter", "10", "--iterations", "3", "--miss-steps", "5", "--rank-report"}

func main() {
	npFlag := flag.String("np", "8,16,32,64,128,256", "the ladder: comma-separated rank counts")
	transFlag := flag.String("transports", "gloo,mpi", "comma-separated: gloo (gohorovodrun --gloo), mpi (scripts/mpirun.sh), hvdrun-mpi (gohorovodrun -np over mpirun), emu (gohorovodrun --gloo --nnodes across -emu-nodes emulated nodes; root)")
	bin := flag.String("bin", "bin", "directory of gohorovodrun, synthetic and emucluster (go build -tags mpi -o bin/ ./cmd/... ./examples/...)")
	timeout := flag.Duration("timeout", 10*time.Minute, "limit of one job")
	minAvail := flag.Int64("min-avail", 2048, "kill a job when the machine's available memory falls below this many MiB (a full /dev/shm is memory)")
	yardIters := flag.Int("yardstick-iters", 100, "MPI_Allreduce iterations of the yardstick at each np")
	noYard := flag.Bool("no-yardstick", false, "skip the raw MPI_Allreduce yardstick (no mpicc)")
	emuNodes := flag.Int("emu-nodes", 8, "with -transports emu: the emulated nodes (np must divide by it)")
	strict := flag.Bool("strict", false, "exit non-zero when a job leaves anything in /dev/shm or the temporary directory")
	flag.Parse()
	o := opts{timeout: *timeout, minAvail: *minAvail << 20, yardIters: *yardIters, emuNodes: *emuNodes, strict: *strict,
		noYard: *noYard, transports: split(*transFlag), args: append(append([]string(nil), defaultArgs...), flag.Args()...)}
	for _, s := range split(*npFlag) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fail(fmt.Errorf("-np %q: want rank counts", s))
		}
		o.nps = append(o.nps, n)
	}
	if err := o.prepare(*bin); err != nil {
		fail(err)
	}
	if o.cluster != nil {
		defer o.cluster.Close()
	}
	left := o.ladder()
	if o.cluster != nil {
		o.cluster.Close()
	}
	if left && o.strict {
		fmt.Fprintln(os.Stderr, "rankbench: jobs left files behind (-strict)")
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "rankbench:", err)
	os.Exit(1)
}

// prepare finds the binaries, compiles the yardstick and, for emu, makes
// the cluster.
func (o *opts) prepare(bin string) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	o.bin, o.program = abs, filepath.Join(abs, "synthetic")
	for _, b := range []string{"gohorovodrun", "synthetic"} {
		if _, err := os.Stat(filepath.Join(abs, b)); err != nil {
			return fmt.Errorf("%w (go build -tags mpi -o bin/ ./cmd/... ./examples/...)", err)
		}
	}
	for _, t := range o.transports {
		if _, ok := transports[t]; !ok {
			return fmt.Errorf("unknown transport %q", t)
		}
	}
	if !o.noYard {
		o.yardstick = filepath.Join(abs, "allreduce_baseline")
		// hvdbench's yardstick, built where hvdbench builds it.
		if out, err := exec.Command("mpicc", "-O2", "-o", o.yardstick, "cmd/hvdbench/yardstick/baseline.c").CombinedOutput(); err != nil {
			return fmt.Errorf("mpicc cmd/hvdbench/yardstick/baseline.c (run rankbench from the repository's root, or -no-yardstick): %v: %s", err, out)
		}
	}
	key := make([]byte, 32)
	rand.Read(key)
	o.secret = hex.EncodeToString(key)
	if !needs(o.transports, "emu") {
		return nil
	}
	if err := emucluster.Check(); err != nil {
		return fmt.Errorf("-transports emu: %w", err)
	}
	o.cluster, err = emucluster.New(emucluster.Options{Nodes: o.emuNodes, Name: fmt.Sprintf("rb%d", os.Getpid()%10000)})
	return err
}

func needs(list []string, x string) bool {
	for _, l := range list {
		if l == x {
			return true
		}
	}
	return false
}

// ladder runs every transport at every np, and the yardstick at every
// np, then prints the tables; it reports whether any job left files
// behind.
func (o *opts) ladder() (leftBehind bool) {
	rows := make(map[string][]row)
	yard := make(map[int]float64)
	for _, np := range o.nps {
		for _, t := range o.transports {
			r := o.one(t, np)
			leftBehind = leftBehind || len(r.leftovers) > 0
			rows[t] = append(rows[t], r)
		}
		if o.yardstick != "" {
			yard[np] = o.allreduce(np)
		}
	}
	fmt.Printf("# rankbench %s, %s, program %s %s\n", time.Now().UTC().Format(time.RFC3339), o.machine(), o.program, strings.Join(o.args, " "))
	for _, t := range o.transports {
		for i := range rows[t] {
			rows[t][i].allreduce = math.NaN()
			if ms, ok := yard[rows[t][i].np]; ok {
				rows[t][i].allreduce = ms
			}
		}
		printTables(os.Stdout, t, rows[t])
	}
	return leftBehind
}

// one runs transport t at np and returns its row.
func (o *opts) one(t string, np int) row {
	s, err := transports[t](o, np)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rankbench: %s np %d: %v\n", t, np, err)
		return row{np: np, err: err.Error()}
	}
	s.program, s.np, s.timeout, s.minAvail = o.program, np, o.timeout, o.minAvail
	start := time.Now()
	obs, err := runJob(s)
	if obs == nil {
		return row{np: np, err: err.Error()}
	}
	r := newRow(np, obs)
	if err != nil {
		r.err = err.Error()
		fmt.Fprintf(os.Stderr, "rankbench: %s np %d: %v\n%s\n", t, np, err, obs.stderr)
	}
	if !obs.sampled && r.err == "" {
		r.err = "rank 0 never printed hold=begin"
	}
	fmt.Fprintf(os.Stderr, "rankbench: %s np %d: %.1f s, step %.2f ms, %d ranks sampled, %d left behind\n",
		t, np, time.Since(start).Seconds(), r.step, r.ranks, len(r.leftovers))
	return r
}

// allreduce runs the yardstick at np and returns its median in ms (NaN
// when it fails).
func (o *opts) allreduce(np int) float64 {
	out, err := exec.Command("scripts/mpirun.sh", strconv.Itoa(np), o.yardstick, "--bytes", strconv.Itoa(o.bytes()),
		"--modes", "whole", "--iters", strconv.Itoa(o.yardIters)).CombinedOutput()
	ms, perr := yardstickMedian(string(out))
	if err = errors.Join(err, perr); err != nil {
		fmt.Fprintf(os.Stderr, "rankbench: yardstick np %d: %v\n", np, err)
		return ms
	}
	return ms
}

// bytes is what a step allreduces: tiny40's 40 tensors of 256 float32.
// With other program arguments the yardstick still reduces these bytes.
func (o *opts) bytes() int { return 40 * 256 * 4 }

// machine describes this machine for the output's header.
func (o *opts) machine() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("host %s, %d CPUs", host, numCPU())
}
