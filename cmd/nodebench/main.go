package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gohorovod/gohorovod/internal/emucluster"
)

// opts are the benchmark's settings.
type opts struct {
	bin, shapes      string
	cases, paths     []string
	iters, warmup    int
	rounds, perNode  int
	timeout          time.Duration
	emu, yardstick   string // the emucluster command and the compiled yardstick
	gloo             bool   // a python3 can import torch
	python           string // that python3
	shimDir, cluster string
	secret           string
	hostsArg         string // -H for gohorovodrun and mpirun
	nodeHosts        []string
	nodes            int
	port             int
	verbose          bool
	extra            []string // more hvdbench flags
}

func main() {
	nodesFlag := flag.String("nodes", "2,3", "comma-separated node counts, one cluster each")
	rateFlag := flag.String("rate", "1gbit", "comma-separated link rates (1gbit, 10gbit, 100mbit; 0: unshaped)")
	lossFlag := flag.Float64("loss", 0, "share of packets each link drops each way")
	perNode := flag.Int("ranks-per-node", 1, "ranks on each node")
	casesFlag := flag.String("cases", "64MiB,resnet50", "cases: 64MiB, resnet50, 4KiBx1000, 4MB")
	pathsFlag := flag.String("paths", "embedded,mpirun,raw-mpi,raw-mpi-ring,gloo", "paths: embedded, mpirun, mpirun-mpi, mpirun-tcp, raw-mpi, raw-mpi-ring, gloo, embedded-hier")
	iters := flag.Int("iters", 10, "timed iterations per case")
	warmup := flag.Int("warmup", 2, "untimed iterations per case")
	rounds := flag.Int("rounds", 3, "interleaved rounds (every path once per round)")
	bin := flag.String("bin", "bin", "directory of gohorovodrun, hvdbench and emucluster (make build)")
	timeout := flag.Duration("timeout", 5*time.Minute, "limit of one path's run")
	verbose := flag.Bool("v", false, "print each run's output")
	extra := flag.String("worker-args", "", "more hvdbench worker flags for our runtime's paths, space-separated (e.g. \"-fusion 134217728\")")
	flag.Parse()

	o := opts{bin: *bin, cases: split(*casesFlag), paths: split(*pathsFlag), iters: *iters, warmup: *warmup,
		rounds: *rounds, perNode: *perNode, timeout: *timeout, verbose: *verbose, extra: strings.Fields(*extra)}
	for _, c := range o.cases {
		if _, ok := caseBytes[c]; !ok {
			fail(fmt.Errorf("unknown case %q", c))
		}
	}
	for _, p := range o.paths {
		if _, ok := runners[p]; !ok {
			fail(fmt.Errorf("unknown path %q", p))
		}
	}
	if err := prepare(&o); err != nil {
		fail(err)
	}
	for _, rs := range split(*rateFlag) {
		rate, err := emucluster.ParseRate(rs)
		if err != nil {
			fail(err)
		}
		for _, ns := range split(*nodesFlag) {
			n, err := strconv.Atoi(ns)
			if err != nil || n < 2 {
				fail(fmt.Errorf("-nodes %q: want counts of 2 or more", ns))
			}
			if err := runConfig(o, n, rate, *lossFlag); err != nil {
				fail(err)
			}
		}
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
	fmt.Fprintln(os.Stderr, "nodebench:", err)
	os.Exit(1)
}

// prepare finds the binaries, compiles the yardstick and checks gloo.
func prepare(o *opts) error {
	if err := emucluster.Check(); err != nil {
		return err
	}
	abs, err := filepath.Abs(o.bin)
	if err != nil {
		return err
	}
	o.bin = abs
	for _, b := range []string{"gohorovodrun", "hvdbench", "emucluster"} {
		if _, err := os.Stat(filepath.Join(o.bin, b)); err != nil {
			return fmt.Errorf("%s/%s: %w (make build first)", o.bin, b, err)
		}
	}
	o.emu = filepath.Join(o.bin, "emucluster")
	wd, _ := os.Getwd()
	o.shapes = filepath.Join(wd, "examples/synthetic/shapes")
	if _, err := os.Stat(filepath.Join(o.shapes, "resnet50_shapes.txt")); err != nil {
		return fmt.Errorf("run nodebench from the repository's root: %w", err)
	}
	if needs(o.paths, "raw-mpi", "raw-mpi-ring") {
		o.yardstick = filepath.Join(o.bin, "allreduce_yardstick")
		src := filepath.Join(wd, "cmd/nodebench/yardstick/allreduce.c")
		if out, err := exec.Command("mpicc", "-O2", "-o", o.yardstick, src).CombinedOutput(); err != nil {
			return fmt.Errorf("mpicc %s: %v: %s", src, err, out)
		}
	}
	if needs(o.paths, "gloo") {
		// Debian's python3-torch is for the system's python3, which
		// another python3 earlier on PATH may hide.
		for _, py := range []string{"/usr/bin/python3", "python3"} {
			if exec.Command(py, "-c", "import torch.distributed").Run() == nil {
				o.gloo, o.python = true, py
				break
			}
		}
		if !o.gloo {
			fmt.Println("# gloo: python3 cannot import torch here; that path is skipped")
		}
	}
	return nil
}

func needs(paths []string, any ...string) bool {
	for _, p := range paths {
		for _, a := range any {
			if p == a {
				return true
			}
		}
	}
	return false
}

// runConfig makes one cluster and runs every path once per round.
func runConfig(o opts, nodes int, rate int64, loss float64) error {
	c, err := emucluster.New(emucluster.Options{Nodes: nodes, Rate: rate, Loss: loss,
		Name: fmt.Sprintf("nb%d", os.Getpid()%10000)})
	if err != nil {
		return err
	}
	defer c.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer func() { signal.Stop(sigs); close(sigs) }() // ends the goroutine below
	go func() {
		if _, ok := <-sigs; ok {
			c.Close()
			os.Exit(130)
		}
	}()
	o.cluster, o.nodes = c.Options().Name, nodes
	o.shimDir, err = os.MkdirTemp("", "nodebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(o.shimDir)
	if _, err := emucluster.WriteSSHShim(o.shimDir, o.cluster, o.emu); err != nil {
		return err
	}
	key := make([]byte, 32)
	rand.Read(key)
	o.secret = hex.EncodeToString(key)
	var hosts []string
	for _, n := range c.Nodes() {
		o.nodeHosts = append(o.nodeHosts, n.Host)
		hosts = append(hosts, fmt.Sprintf("%s:%d", n.Host, o.perNode))
	}
	o.hostsArg = strings.Join(hosts, ",")
	rateName := emucluster.FormatRate(rate)
	fmt.Printf("# %d nodes x %d ranks, links %s each way, loss %g, %d rounds of %d iterations, %s\n",
		nodes, o.perNode, rateName, loss, o.rounds, o.iters, time.Now().UTC().Format(time.RFC3339))
	r := &result{nodes: nodes, perNode: o.perNode, rate: rate, paths: o.paths, cases: o.cases}
	run := 0
	for round := 0; round < o.rounds; round++ {
		for _, p := range o.paths {
			if p == "gloo" && !o.gloo {
				continue
			}
			// A fresh port each run: the last one may still be in
			// TIME_WAIT.
			run++
			o.port = 29100 + run
			out, err := runners[p](c, o)
			times := parseTimes(out)
			if o.verbose || err != nil || len(times) < len(o.cases) {
				fmt.Printf("# round %d path %s: %v\n%s\n", round, p, err, indent(out))
			}
			r.add(p, times)
		}
	}
	r.print(os.Stdout, rateName)
	return nil
}

func indent(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return "#   " + strings.ReplaceAll(s, "\n", "\n#   ")
}

// runners run one path across the cluster and return its output.
var runners = map[string]func(*emucluster.Cluster, opts) (string, error){
	"embedded":      func(c *emucluster.Cluster, o opts) (string, error) { return runEmbedded(c, o, false) },
	"embedded-hier": func(c *emucluster.Cluster, o opts) (string, error) { return runEmbedded(c, o, true) },
	"mpirun":        func(c *emucluster.Cluster, o opts) (string, error) { return runMPIRuntime(c, o, "") },
	"mpirun-mpi":    func(c *emucluster.Cluster, o opts) (string, error) { return runMPIRuntime(c, o, "mpi") },
	"mpirun-tcp":    func(c *emucluster.Cluster, o opts) (string, error) { return runMPIRuntime(c, o, "gloo") },
	"raw-mpi":       func(c *emucluster.Cluster, o opts) (string, error) { return runRawMPI(c, o, false) },
	"raw-mpi-ring":  func(c *emucluster.Cluster, o opts) (string, error) { return runRawMPI(c, o, true) },
	"gloo":          runGloo,
}

// workerArgs is hvdbench's worker command line for the cases.
func workerArgs(o opts, hier bool) []string {
	a := []string{filepath.Join(o.bin, "hvdbench"), "-worker", "-bench-dir", o.shapes,
		"-cases", strings.Join(o.cases, ","), "-iters", strconv.Itoa(o.iters), "-warmup", strconv.Itoa(o.warmup)}
	if hier {
		a = append(a, "-hierarchical")
	}
	return append(a, o.extra...)
}

// env is what every process on a node gets: this environment without the
// variables that would place it in another job, the shim first on PATH.
func (o opts) env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "OMPI_") || strings.HasPrefix(k, "PMIX_") || strings.HasPrefix(k, "HOROVOD_") ||
			strings.HasPrefix(k, "PET_") || strings.HasPrefix(k, "GOHOROVOD_") || k == "PATH" || k == "MASTER_ADDR" || k == "MASTER_PORT" {
			continue
		}
		out = append(out, kv)
	}
	out = append(out, "PATH="+o.shimDir+":"+os.Getenv("PATH"), "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	return append(out, extra...)
}

// onNodes runs argv(i) on every node at once and returns node 0's output
// (where rank 0 prints), or the first failure with its output.
func onNodes(c *emucluster.Cluster, o opts, argv func(i int) []string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	outs := make([]string, o.nodes)
	errs := make([]error, o.nodes)
	var wg sync.WaitGroup
	for i := 0; i < o.nodes; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			full := c.CommandArgv(i, argv(i)...)
			cmd := exec.CommandContext(ctx, full[0], full[1:]...)
			cmd.Env = env
			cmd.WaitDelay = 5 * time.Second
			b, err := cmd.CombinedOutput()
			outs[i], errs[i] = string(b), err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return outs[0] + "\n" + outs[i], fmt.Errorf("node %d: %w", i, err)
		}
	}
	return outs[0], nil
}

func runEmbedded(c *emucluster.Cluster, o opts, hier bool) (string, error) {
	return onNodes(c, o, func(i int) []string {
		return append([]string{filepath.Join(o.bin, "gohorovodrun"), "--nnodes", strconv.Itoa(o.nodes),
			"--node-rank", strconv.Itoa(i), "--nproc-per-node", strconv.Itoa(o.perNode),
			"--master-addr", o.nodeHosts[0], "--master-port", strconv.Itoa(o.port)}, workerArgs(o, hier)...)
	}, o.env("GOHOROVOD_SECRET="+o.secret))
}

// one runs argv on node 0 alone.
func one(c *emucluster.Cluster, o opts, argv []string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	full := c.CommandArgv(0, argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.Env = env
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// runMPIRuntime runs the runtime under mpirun through gohorovodrun, with
// HOROVOD_CPU_OPERATIONS=cpuOps when it is set: "mpi" keeps the tensors on
// MPI, "gloo" puts them on the TCP ring, unset lets Init measure both.
func runMPIRuntime(c *emucluster.Cluster, o opts, cpuOps string) (string, error) {
	argv := append([]string{filepath.Join(o.bin, "gohorovodrun"), "-np", strconv.Itoa(o.nodes * o.perNode),
		"-H", o.hostsArg}, workerArgs(o, false)...)
	var env []string
	if cpuOps != "" {
		env = append(env, "HOROVOD_CPU_OPERATIONS="+cpuOps)
	}
	return one(c, o, argv, o.env(env...))
}

func runRawMPI(c *emucluster.Cluster, o opts, ring bool) (string, error) {
	argv := []string{"mpirun", "--allow-run-as-root", "-np", strconv.Itoa(o.nodes * o.perNode), "-H", o.hostsArg,
		"--bind-to", "none", "--map-by", "slot"}
	if ring {
		argv = append(argv, "--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4")
	}
	argv = append(argv, o.yardstick, strconv.Itoa(o.iters), strconv.Itoa(o.warmup))
	// The yardstick packs a case's tensors in one buffer.
	for _, cs := range o.cases {
		argv = append(argv, fmt.Sprintf("%s=%.0f", cs, caseBytes[cs]))
	}
	return one(c, o, argv, o.env())
}

func runGloo(c *emucluster.Cluster, o opts) (string, error) {
	wd, _ := os.Getwd()
	if o.perNode != 1 {
		return "", errors.New("gloo: one rank per node only")
	}
	return onNodes(c, o, func(i int) []string {
		return []string{o.python, filepath.Join(wd, "scripts/torch_gloo_bench.py"), "--np", strconv.Itoa(o.nodes),
			"--rank", strconv.Itoa(i), "--master", fmt.Sprintf("%s:%d", o.nodeHosts[0], o.port),
			"--shapes", filepath.Join(o.shapes, "resnet50_shapes.txt"), "--cases", strings.Join(o.cases, ","),
			"--iters", strconv.Itoa(o.iters), "--warmup", strconv.Itoa(o.warmup)}
	}, o.env())
}
