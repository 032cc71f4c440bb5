package elastic_test

import (
	"testing"

	"github.com/gohorovod/gohorovod/internal/elasticbench"
)

// The cost of a commit (the goal: a commit every 10 steps costs
// under 5% of MNIST's step time). BenchmarkMNISTStep is the yardstick of
// BenchmarkCommitMNIST, BenchmarkCopy100MB that of BenchmarkCommit100MB;
// cmd/elasticbench prints the ratios side by side.
//
// A commit allocates a copy of the optimizer's state (optim's State() is a
// deep copy); the parameter values go into the snapshot's own buffers. In
// these benchmarks' small heaps the garbage collector runs every few
// commits, so BenchmarkCommitMNIST costs several times what it costs in
// cmd/elasticbench (docs/BENCHMARKS.md), whose heap, like examples/mnist's with its dataset,
// is hundreds of MB.

var mnistHidden = []int{256, 128}

const (
	mnistBatch = 64
	// bigBytes is the 100 MB state: 50 MiB of float32 parameters in
	// bigTensors tensors of 1 MiB and 50 MiB of their SGD momentum, 100 MiB
	// copied per commit.
	bigBytes   = 100 << 20
	bigTensors = 50
)

func newMNIST(b *testing.B) *elasticbench.MNIST {
	b.Helper()
	m, err := elasticbench.NewMNIST(mnistHidden, mnistBatch, 1)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// BenchmarkMNISTStep is one forward, backward and SGD step of examples/mnist's
// MLP (784-256-128-10) on a batch of 64 random images, single process, no
// runtime.
func BenchmarkMNISTStep(b *testing.B) {
	m := newMNIST(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Step(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*mnistBatch)/b.Elapsed().Seconds(), "samples/s")
}

// BenchmarkCommitMNIST commits what examples/mnist commits: the MLP's
// parameters and SGD momentum (the bytes of SetBytes), the sampler's
// position, the epoch and the batch.
func BenchmarkCommitMNIST(b *testing.B) {
	m := newMNIST(b)
	if err := m.Step(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(m.SnapshotBytes()))
	b.ReportAllocs()
	for b.Loop() {
		if err := m.State.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCommit100MB commits a 100 MiB snapshot: 50 MiB of float32
// parameters in 50 tensors and their 50 MiB of SGD momentum.
func BenchmarkCommit100MB(b *testing.B) {
	s, err := elasticbench.NewBig(bigBytes, bigTensors)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(s.SnapshotBytes()))
	b.ReportAllocs()
	for b.Loop() {
		if err := s.State.Commit(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCopy100MB is the yardstick of BenchmarkCommit100MB: one copy of
// 100 MiB between two slices allocated beforehand.
func BenchmarkCopy100MB(b *testing.B) {
	dst, src := elasticbench.NewCopy(bigBytes)
	b.SetBytes(bigBytes)
	b.ReportAllocs()
	for b.Loop() {
		copy(dst, src)
	}
}
