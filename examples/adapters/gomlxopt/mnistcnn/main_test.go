package main

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"

	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

func randTensor(r *rand.Rand, dims ...int) *tensors.Tensor {
	n := 1
	for _, d := range dims {
		n *= d
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return tensors.FromFlatDataAndDimensions(v, dims...)
}

// matmul's own gradients equal the ones GoMLX derives for graph.Dot.
func TestMatmulGradients(t *testing.T) {
	backend, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	x, w, c := randTensor(r, 6, 5), randTensor(r, 5, 4), randTensor(r, 6, 4)
	grads := func(mul func(x, w *graph.Node) *graph.Node) [3][]float32 {
		exec, err := graph.NewExec(backend, func(x, w, c *graph.Node) []*graph.Node {
			y := mul(x, w)
			loss := graph.ReduceAllSum(graph.Mul(graph.Tanh(y), c))
			g := graph.Gradient(loss, x, w)
			return []*graph.Node{y, g[0], g[1]}
		})
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Exec(x, w, c)
		if err != nil {
			t.Fatal(err)
		}
		var res [3][]float32
		for i := range res {
			res[i] = tensors.MustCopyFlatData[float32](out[i])
		}
		return res
	}
	own, ref := grads(matmul), grads(graph.Dot)
	for i, name := range []string{"product", "gradient of x", "gradient of w"} {
		if len(own[i]) != len(ref[i]) {
			t.Fatalf("%s: %d values, want %d", name, len(own[i]), len(ref[i]))
		}
		for j := range own[i] {
			if d := math.Abs(float64(own[i][j] - ref[i][j])); d > 1e-5*(1+math.Abs(float64(ref[i][j]))) {
				t.Fatalf("%s[%d] = %g, GoMLX's %g", name, j, own[i][j], ref[i][j])
			}
		}
	}
}

// im2col cuts the 5×5 patches with stride 2 and zero padding 2.
func TestIm2col(t *testing.T) {
	img := make([]float32, 28*28)
	for i := range img {
		img[i] = float32(i + 1)
	}
	dst := make([]float32, out1*out1*patch1)
	im2col(dst, img)
	at := func(oi, oj, di, dj int) float32 { return dst[((oi*out1+oj)*k1+di)*k1+dj] }
	pixel := func(i, j int) float32 { return float32(i*28 + j + 1) }
	cases := []struct {
		oi, oj, di, dj int
		want           float32
	}{
		{0, 0, 0, 0, 0},           // padding
		{0, 0, 2, 2, pixel(0, 0)}, // the centre of the first patch is the first pixel
		{0, 0, 4, 4, pixel(2, 2)}, //
		{1, 3, 2, 2, pixel(2, 6)}, // centres move by the stride
		{13, 13, 2, 2, pixel(26, 26)},
		{13, 13, 3, 3, pixel(27, 27)},
		{13, 13, 4, 4, 0}, // padding past the last row and column
	}
	for _, c := range cases {
		if got := at(c.oi, c.oj, c.di, c.dj); got != c.want {
			t.Errorf("patch (%d,%d) tap (%d,%d) = %g, want %g", c.oi, c.oj, c.di, c.dj, got, c.want)
		}
	}
}

// spaceToDepth2 moves each 2×2 block into the channels, in row-major order
// of the block and then the channel.
func TestSpaceToDepth2(t *testing.T) {
	backend, err := simplego.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	const b, h, w, c = 1, 4, 4, 2
	in := make([]float32, b*h*w*c)
	for i := range in {
		in[i] = float32(i)
	}
	exec, err := graph.NewExec(backend, spaceToDepth2)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Exec(tensors.FromFlatDataAndDimensions(in, b, h, w, c))
	if err != nil {
		t.Fatal(err)
	}
	got := tensors.MustCopyFlatData[float32](out[0])
	if d := out[0].Shape().Dimensions; len(d) != 4 || d[1] != 2 || d[2] != 2 || d[3] != 4*c {
		t.Fatalf("shape %v, want [1 2 2 8]", d)
	}
	for oi := range 2 {
		for oj := range 2 {
			for di := range 2 {
				for dj := range 2 {
					for ch := range c {
						want := in[((2*oi+di)*w+2*oj+dj)*c+ch]
						if g := got[((oi*2+oj)*4+di*2+dj)*c+ch]; g != want {
							t.Fatalf("block (%d,%d) tap (%d,%d) channel %d = %g, want %g", oi, oj, di, dj, ch, g, want)
						}
					}
				}
			}
		}
	}
}

// TestTrainNP2 trains the CNN at np 2 on the in-memory group, briefly (five
// steps of 2×64 images): the loss falls well below chance's, the test
// accuracy well above chance's 10%, and only rank 0 prints.
func TestTrainNP2(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	if raceDetector {
		t.Skip("the race detector slows GoMLX's kernels about fortyfold; make test-adapters runs this test without it")
	}
	o, err := parse([]string{"--epochs", "1", "--train-limit", "640", "--test-limit", "200", "--threads", "1"})
	if err != nil {
		t.Fatal(err)
	}
	var outs [2]bytes.Buffer
	err = hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		return run(ctx, o, r, &outs[rank])
	}, hvd.WithConfig(config.Default()), hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(outs[0].String())
	if outs[1].Len() != 0 {
		t.Fatalf("rank 1 printed %q", outs[1].String())
	}
	m := regexp.MustCompile(`epoch 1: loss ([0-9.]+)  test accuracy ([0-9.]+)%`).FindStringSubmatch(outs[0].String())
	if m == nil {
		t.Fatal("rank 0 printed no epoch line")
	}
	loss, _ := strconv.ParseFloat(m[1], 64)
	acc, _ := strconv.ParseFloat(m[2], 64)
	if loss >= 2.1 || acc < 40 {
		t.Fatalf("after five steps: loss %g (chance: 2.30), test accuracy %g%%", loss, acc)
	}
}
