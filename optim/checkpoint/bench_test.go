package checkpoint_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gohorovod/gohorovod/internal/elasticbench"
	"github.com/gohorovod/gohorovod/optim/checkpoint"
	"github.com/gohorovod/gohorovod/optim/elastic"
)

// The cost of a checkpoint, on one rank, into a directory of the test's
// temporary directory (its disk): BenchmarkSave* write synchronously
// (snapshot, write, fsync, rename, directory fsync, pruning to the three
// newest) and report the file's MB/s; BenchmarkSaveStall* write in the
// background, as by default, and time only what training waits for, the
// Save call (the previous write is flushed outside the timer). The states:
// examples/mnist's (the 784-256-128-10 MLP's parameters and SGD momentum,
// the sampler, two counters: 1.9 MB) and a ResNet-50-sized one
// (25,556,979 float32 parameters in 161 tensors and their momentum:
// 204 MB).

// resnet50Tensors and resnet50Elems shape the ResNet-50-sized state:
// torchvision's ResNet-50 has 161 tensors of 25,557,032 parameters.
const resnet50Tensors, resnet50Elems = 161, 158739

func mnistState(b *testing.B) *elastic.State {
	m, err := elasticbench.NewMNIST([]int{256, 128}, 64, 1)
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Step(); err != nil {
		b.Fatal(err)
	}
	return m.State
}

func resnet50State(b *testing.B) *elastic.State {
	big, err := elasticbench.NewBig(resnet50Tensors*resnet50Elems*8, resnet50Tensors)
	if err != nil {
		b.Fatal(err)
	}
	return big.State
}

func newCheckpointer(b *testing.B, s *elastic.State, background bool) (*checkpoint.Checkpointer, string) {
	dir := filepath.Join(b.TempDir(), "ckpt")
	c, err := checkpoint.New(dir, s, checkpoint.Group(solo{}, func() int { return 0 }), checkpoint.Background(background))
	if err != nil {
		b.Fatal(err)
	}
	return c, dir
}

// benchSave saves synchronously b.N times and reports the file's bytes per
// second.
func benchSave(b *testing.B, s *elastic.State) {
	ctx := context.Background()
	c, dir := newCheckpointer(b, s, false)
	if err := c.Save(ctx, 0); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, checkpoint.FileName(0)))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	step := int64(1)
	for b.Loop() {
		if err := c.Save(ctx, step); err != nil {
			b.Fatal(err)
		}
		step++
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/save")
	if err := c.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// benchStall times the Save calls of background writes, each write
// flushed outside the timer.
func benchStall(b *testing.B, s *elastic.State) {
	ctx := context.Background()
	c, _ := newCheckpointer(b, s, true)
	b.ReportAllocs()
	step := int64(0)
	for b.Loop() {
		if err := c.Save(ctx, step); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := c.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		step++
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1e3/float64(b.N), "stall-ms")
	if err := c.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkSaveMNIST: a synchronous checkpoint of examples/mnist's state.
func BenchmarkSaveMNIST(b *testing.B) { benchSave(b, mnistState(b)) }

// BenchmarkSaveResNet50: a synchronous checkpoint of a ResNet-50-sized
// state.
func BenchmarkSaveResNet50(b *testing.B) { benchSave(b, resnet50State(b)) }

// BenchmarkSaveStallMNIST: what a background checkpoint of examples/mnist's
// state stalls training for (the snapshot).
func BenchmarkSaveStallMNIST(b *testing.B) { benchStall(b, mnistState(b)) }

// BenchmarkSaveStallResNet50: what a background checkpoint of a
// ResNet-50-sized state stalls training for (the snapshot).
func BenchmarkSaveStallResNet50(b *testing.B) { benchStall(b, resnet50State(b)) }

// BenchmarkLoadResNet50: Load of a ResNet-50-sized checkpoint on one rank:
// read, verify every checksum, decode into the state.
func BenchmarkLoadResNet50(b *testing.B) {
	ctx := context.Background()
	c, dir := newCheckpointer(b, resnet50State(b), false)
	if err := c.Save(ctx, 1); err != nil {
		b.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, checkpoint.FileName(1)))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size())
	for b.Loop() {
		if _, err := c.Load(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/load")
}
