package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func main() {
	isWorker := flag.Bool("worker", false, "run as an MPI rank (set by the orchestrator)")
	np := flag.Int("np", 2, "ranks")
	benchDir := flag.String("bench-dir", "examples/synthetic/shapes", "directory of the shapes files (resnet50_shapes.txt)")
	iters := flag.Int("iters", 20, "timed steps per case")
	warmup := flag.Int("warmup", 3, "untimed steps per case")
	thresholds := flag.String("fusion", "", "comma-separated fusion thresholds in bytes (default: the configured default)")
	chunks := flag.String("chunk", "", "comma-separated transport chunk sizes in bytes (0: none; default: the runtime's)")
	fchunks := flag.String("fchunk", "", "comma-separated fusion piece sizes in bytes (0: whole response; default: the runtime's)")
	maxFused := flag.String("maxfused", "", "comma-separated largest fused tensor sizes in bytes (0: no limit; default: the runtime's)")
	cases := flag.String("cases", "resnet50,optimizer,64MiB,4KiBx1000,4KiBx1000flat,tinyx161,tinyx1000", "cases to run")
	rounds := flag.Int("rounds", 1, "yardstick-then-runtime rounds; more than one prints summary lines with the medians over rounds")
	rawFusion := flag.Int64("raw-fusion", 4<<20, "the yardstick's fused-mode buffer in bytes")
	cpuProfile := flag.String("cpuprofile", "", "write rank 0's CPU profile of the runtime cases to this file")
	hierarchical := flag.Bool("hierarchical", false, "hierarchical allreduce (HOROVOD_HIERARCHICAL_ALLREDUCE); the nodes are the launcher's hosts, or HOROVOD_HOSTNAME per rank under mpirun")
	flag.Parse()
	if *isWorker || os.Getenv("OMPI_COMM_WORLD_SIZE") != "" || os.Getenv("PMI_SIZE") != "" {
		a := workerArgs{shapes: *benchDir + "/resnet50_shapes.txt", iters: *iters, warmup: *warmup,
			cases: strings.Split(*cases, ","), cpuProfile: *cpuProfile, hierarchical: *hierarchical}
		var err error
		if a.thresholds, err = int64s(*thresholds); err != nil {
			fail(err)
		}
		if len(a.thresholds) == 0 {
			a.thresholds = []int64{defaultThreshold()}
		}
		ch, err := int64s(*chunks)
		if err != nil {
			fail(err)
		}
		for _, c := range ch {
			a.chunks = append(a.chunks, int(c))
		}
		if len(a.chunks) == 0 {
			a.chunks = []int{-1} // the runtime's default
		}
		if a.fchunks, err = int64s(*fchunks); err != nil {
			fail(err)
		}
		if len(a.fchunks) == 0 {
			a.fchunks = []int64{-1} // the runtime's default
		}
		if a.maxFused, err = int64s(*maxFused); err != nil {
			fail(err)
		}
		if len(a.maxFused) == 0 {
			a.maxFused = []int64{-1} // the runtime's default
		}
		if err := worker(a); err != nil {
			fail(err)
		}
		return
	}
	var extra []string
	flag.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "fusion", "chunk", "fchunk", "maxfused", "cases", "warmup", "bench-dir", "cpuprofile", "hierarchical":
			extra = append(extra, "-"+f.Name, f.Value.String())
		}
	})
	if err := orchestrate(orchArgs{np: *np, benchDir: *benchDir, iters: *iters, worker: extra, fusion: *rawFusion, rounds: *rounds,
		cases: strings.Split(*cases, ",")}); err != nil {
		fail(err)
	}
}

func int64s(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hvdbench:", err)
	os.Exit(1)
}
