package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/examples/internal/localrun"
	"github.com/gohorovod/gohorovod/internal/cputime"
	"github.com/gohorovod/gohorovod/internal/scaling"
	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// TestDataParallel trains at np 2 on the in-memory group (one epoch on the
// first 12,000 images, to keep the test short) and checks that the model
// learns, that both ranks end with identical parameters, and that only rank
// 0 prints.
func TestDataParallel(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	const n = 2
	res, outs := trainLocal(t, n, "--epochs", "1", "--train-limit", "12000", "--warmup-epochs", "0.5")
	if res[0].checksum != res[1].checksum {
		t.Fatal("ranks ended with different parameters")
	}
	if res[0].accuracy < 0.9 {
		t.Fatalf("test accuracy %.3f after one epoch on 12,000 images", res[0].accuracy)
	}
	if !strings.Contains(outs[0].String(), "epoch 1:") || outs[1].Len() != 0 {
		t.Fatalf("rank 0 printed %q, rank 1 %q", outs[0].String(), outs[1].String())
	}
	// The epoch line carries the CPU per sample, in scalebench's format.
	cpu, err := scaling.CPUPerSample(strings.NewReader(outs[0].String()))
	if _, known := cputime.Seconds(); known && (err != nil || cpu <= 0 || math.Abs(cpu-1000*res[0].cpuPerSample) > 1e-3*cpu) {
		t.Fatalf("CPU per sample %v ms (%v), the run's %v s", cpu, err, res[0].cpuPerSample)
	}
	t.Log(outs[0].String())
}

// TestLocalSGD trains as TestDataParallel does, with post-local SGD (50
// synchronous steps, then averaging every 4): the model learns, and the
// ranks end with identical parameters (averaged at the epoch's end).
func TestLocalSGD(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	const n = 2
	res, outs := trainLocal(t, n, "--epochs", "1", "--train-limit", "12000", "--warmup-epochs", "0.5",
		"--local-sgd-start", "50", "--averaging-period", "4")
	t.Log(outs[0].String())
	if res[0].checksum != res[1].checksum {
		t.Fatal("ranks ended with different parameters")
	}
	if res[0].accuracy < 0.9 {
		t.Fatalf("test accuracy %.3f after one epoch on 12,000 images", res[0].accuracy)
	}
	if !strings.Contains(outs[0].String(), "post-local SGD: 50 synchronous steps") {
		t.Errorf("rank 0 did not announce post-local SGD: %q", outs[0].String())
	}
	// 94 steps of 64 of 6,000 images per rank: 50 allreduce the gradients,
	// 11 of the other 44 average the parameters (as many bytes, 940,584).
	if want := fmt.Sprintf(" %.0f KiB allreduced/step", float64((50+11)*940584)/1024/94); !strings.Contains(outs[0].String(), want) {
		t.Errorf("rank 0 printed %q, want %q", outs[0].String(), want)
	}
}

// TestAccuracyParity trains at np 2 on the in-memory group (two epochs on
// the first 12,000 images, the same seed and data order for each) with
// synchronous SGD, with PowerSGD at rank 2 and with post-local SGD
// averaging every 4 steps, and checks that each of the last two ends
// within 0.5 points of synchronous SGD's test accuracy (the accuracy
// bound asked of both; the full-data figures are in docs/BENCHMARKS.md) while its training
// differs from it (other parameters) and moves fewer bytes per step.
func TestAccuracyParity(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	if raceDetector {
		t.Skip("six epochs on 12,000 images, too slow under the race detector; make test-unit runs this test without it (the algorithms' training runs under it in TestAlgorithms and TestLocalSGD)")
	}
	const n = 2
	base := []string{"--epochs", "2", "--train-limit", "12000", "--warmup-epochs", "0.5"}
	sync, syncOut := trainLocal(t, n, base...)
	syncKiB := allreducedKiB(t, syncOut[0].String())
	t.Logf("synchronous: %.2f%%, %.0f KiB/step", 100*sync[0].accuracy, syncKiB)
	for _, c := range []struct {
		name string
		args []string
	}{
		{"powersgd-rank-2", []string{"--powersgd-rank", "2", "--powersgd-start", "50"}},
		{"local-sgd-period-4", []string{"--local-sgd-start", "50", "--averaging-period", "4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res, outs := trainLocal(t, n, append(append([]string(nil), base...), c.args...)...)
			kib := allreducedKiB(t, outs[0].String())
			t.Logf("%s: %.2f%%, %.0f KiB/step", c.name, 100*res[0].accuracy, kib)
			if res[0].checksum != res[1].checksum {
				t.Fatal("ranks ended with different parameters")
			}
			if res[0].checksum == sync[0].checksum {
				t.Fatal("trained exactly as synchronous SGD did")
			}
			if d := 100 * (sync[0].accuracy - res[0].accuracy); d > 0.5 {
				t.Errorf("test accuracy %.2f%%, %.2f points below synchronous SGD's %.2f%%", 100*res[0].accuracy, d, 100*sync[0].accuracy)
			}
			if !(kib < syncKiB/2) {
				t.Errorf("%.0f KiB allreduced per step, synchronous SGD %.0f", kib, syncKiB)
			}
			if c.name == "powersgd-rank-2" {
				// The last epoch is compressed throughout: per step the
				// weights' factors, (rows+cols)·2 float32s each, and the
				// biases as they are.
				want := float64(((256+784)*2+(128+256)*2+(10+128)*2+256+128+10)*4) / 1024
				if math.Round(want) != kib {
					t.Errorf("%.0f KiB allreduced per step, want %.0f", kib, want)
				}
			}
		})
	}
}

// allreducedKiB returns the KiB allreduced per step that the last epoch
// line of out reports.
func allreducedKiB(t *testing.T, out string) float64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	f := strings.Fields(lines[len(lines)-1])
	for i := 1; i < len(f); i++ {
		if strings.HasPrefix(f[i], "KiB") {
			v, err := strconv.ParseFloat(f[i-1], 64)
			if err != nil {
				t.Fatalf("%q: %v", lines[len(lines)-1], err)
			}
			return v
		}
	}
	t.Fatalf("no KiB allreduced/step in %q", out)
	return 0
}

// TestElastic runs the elastic path in a process alone (one rank, no
// launcher), where elastic.Run syncs the state and calls the training
// function once: one epoch on the first 3,000 images, 47 steps of 64,
// committing every 10 steps and at the epoch's end.
func TestElastic(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	o, err := parse([]string{"--elastic", "--epochs", "1", "--train-limit", "3000", "--commit-every", "10"})
	if err != nil {
		t.Fatal(err)
	}
	ress, outs, err := localrun.Run(1, config.Default(), 5*time.Minute, func(ctx context.Context, r *hvd.Runtime, out io.Writer) (result, error) {
		return runStateful(ctx, o, r, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	res, out := ress[0], outs[0]
	t.Log(out.String())
	if res.accuracy < 0.8 { // well below what these settings reach (docs/BENCHMARKS.md)
		t.Errorf("test accuracy %.3f after one epoch on 3,000 images", res.accuracy)
	}
	steps := (3000 + 63) / 64
	if want := steps/10 + 1; res.commits != want {
		t.Errorf("%d commits in %d steps, want %d (every 10 steps and at the epoch's end)", res.commits, steps, want)
	}
	if res.commitTime <= 0 || res.trainTime <= res.commitTime {
		t.Errorf("commits took %v of %v training", res.commitTime, res.trainTime)
	}
	if res.size != 1 || res.round != 0 {
		t.Errorf("ended at size %d round %d, want 1 and 0 (not an elastic launch)", res.size, res.round)
	}
	for _, want := range []string{"epoch 1: size 1 round 0  loss ", "commits: 5 in "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestCoreShare: each local rank gets an equal share of the cores, at
// least one.
func TestCoreShare(t *testing.T) {
	cases := []struct{ cpus, local, want int }{
		{2, 1, 2}, {2, 2, 1}, {2, 4, 1}, {16, 4, 4}, {16, 3, 5}, {4, 0, 4},
	}
	for _, c := range cases {
		if got := coreShare(c.cpus, c.local); got != c.want {
			t.Errorf("coreShare(%d, %d) = %d, want %d", c.cpus, c.local, got, c.want)
		}
	}
}

// TestParse: the options that shape the distributed optimizer are
// checked.
func TestParse(t *testing.T) {
	cases := []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--compression", "fp16", "--groups", "2"}, true},
		{[]string{"--compression", "bf16"}, true},
		{[]string{"--compression", "fp8"}, false},
		{[]string{"--groups", "-1"}, false},
		{[]string{"--epochs", "0"}, false},
		{[]string{"--elastic", "--commit-every", "5"}, true},
		{[]string{"--elastic", "--commit-every", "0"}, false},
		{[]string{"--batchnorm", "none"}, true},
		{[]string{"--batchnorm", "local"}, true},
		{[]string{"--batchnorm", "sync", "--groups", "2"}, true},
		{[]string{"--batchnorm", "group"}, false},
		{[]string{"--batchnorm", ""}, false},
		{[]string{"--batchnorm", "sync", "--elastic"}, false},
		{[]string{"--batchnorm", "local", "--elastic"}, false},
		{[]string{"--batchnorm", "none", "--elastic"}, true},
		{[]string{"--local-sgd-start", "100", "--averaging-period", "4"}, true},
		{[]string{"--local-sgd-start", "0", "--averaging-period", "1"}, true},
		{[]string{"--local-sgd-start", "-1"}, true}, // off
		{[]string{"--local-sgd-start", "-2"}, false},
		{[]string{"--local-sgd-start", "10", "--averaging-period", "0"}, false},
		{[]string{"--local-sgd-start", "10", "--averaging-period", "8", "--hierarchical-period", "2"}, true},
		{[]string{"--local-sgd-start", "10", "--averaging-period", "8", "--hierarchical-period", "3"}, false},
		{[]string{"--local-sgd-start", "10", "--averaging-period", "8", "--hierarchical-period", "8"}, false},
		{[]string{"--local-sgd-start", "10", "--hierarchical-period", "-1"}, false},
		{[]string{"--averaging-period", "8", "--hierarchical-period", "2"}, false}, // needs --local-sgd-start
		{[]string{"--elastic", "--local-sgd-start", "10"}, false},
		{[]string{"--batchnorm", "sync", "--local-sgd-start", "10"}, true},
		{[]string{"--powersgd-rank", "2", "--powersgd-start", "100"}, true},
		{[]string{"--powersgd-rank", "-1"}, false},
		{[]string{"--powersgd-rank", "1", "--powersgd-start", "-1"}, false},
		{[]string{"--powersgd-rank", "1", "--compression", "fp16"}, false},
		{[]string{"--checkpoint-dir", "d"}, true},
		{[]string{"--checkpoint-dir", "d", "--checkpoint-every", "0"}, false},
		{[]string{"--checkpoint-dir", "d", "--elastic", "--commit-every", "10", "--checkpoint-every", "30"}, true},
		{[]string{"--checkpoint-dir", "d", "--elastic", "--commit-every", "10", "--checkpoint-every", "25"}, false},
		{[]string{"--checkpoint-dir", "d", "--batchnorm", "local"}, false},
		{[]string{"--checkpoint-dir", "d", "--powersgd-rank", "2"}, false},
		{[]string{"--checkpoint-dir", "d", "--local-sgd-start", "10"}, false},
	}
	for _, c := range cases {
		_, err := parse(c.args)
		if (err == nil) != c.ok {
			t.Errorf("parse(%q): %v", c.args, err)
		}
	}
	if o, err := parse(nil); err != nil || o.norm != "none" {
		t.Errorf("default --batchnorm %q (%v), want none", o.norm, err)
	}
	o, err := parse([]string{"--powersgd-rank", "2", "--powersgd-start", "100"})
	if err != nil || o.psgdRank != 2 || o.psgdFrom != 100 {
		t.Fatalf("--powersgd-rank 2 --powersgd-start 100: %+v, %v", o, err)
	}
	if o, _ := parse(nil); o.psgdRank != 0 {
		t.Fatalf("PowerSGD on by default: rank %d", o.psgdRank)
	}
}

// TestBatchNorm trains briefly at np 2 on the in-memory group with local
// and with sync batch normalisation (one epoch on the first 3,000 images,
// batch 16 per rank) and checks that the model learns, that both ranks end
// with identical parameters (batch norm weights and biases included), and,
// for sync only, identical running statistics.
func TestBatchNorm(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	const n = 2
	for _, norm := range []string{"local", "sync"} {
		t.Run(norm, func(t *testing.T) {
			res, outs := trainLocal(t, n, "--epochs", "1", "--train-limit", "3000", "--batch", "16", "--warmup-epochs", "0.5", "--batchnorm", norm)
			t.Log(outs[0].String())
			if res[0].checksum != res[1].checksum {
				t.Fatal("ranks ended with different parameters")
			}
			if same := res[0].running == res[1].running; same != (norm == "sync") {
				t.Errorf("running statistics equal on both ranks: %v", same)
			}
			if res[0].accuracy < 0.85 {
				t.Errorf("test accuracy %.3f after one epoch on 3,000 images", res[0].accuracy)
			}
			if !strings.Contains(outs[0].String(), "batch norm "+norm) {
				t.Errorf("rank 0 printed %q", outs[0].String())
			}
		})
	}
}

// trainLocal parses args and trains with them on n in-memory ranks at the
// default configuration, returning each rank's result and output; it
// fails the test on any error.
func trainLocal(t *testing.T, n int, args ...string) ([]result, []bytes.Buffer) {
	t.Helper()
	o, err := parse(args)
	if err != nil {
		t.Fatal(err)
	}
	res, outs, err := localrun.Run(n, config.Default(), 5*time.Minute, func(ctx context.Context, r *hvd.Runtime, out io.Writer) (result, error) {
		return run(ctx, o, r, out)
	})
	if err != nil {
		t.Fatal(err)
	}
	return res, outs
}
