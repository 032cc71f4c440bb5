package optim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// byteGradReference is ByteGrad written from its formulas for size
// simulated ranks, one bucket: xs[r] is rank r's vector (its gradient
// plus its residual). The vector of N values is cut into size chunks,
// the first N mod size one value longer; every rank quantizes each chunk
// with the chunk's own min and max; the owner of chunk c sums the size
// dequantized copies (in rank order, in float64), multiplies by scale,
// adds its residual owner[c] (when owner is not nil) and quantizes the
// result again; every rank decodes every owner's chunk. It returns that
// vector, each rank's quantization error of its vector, and the owners'
// errors of the re-quantization (one vector, each chunk its owner's).
func byteGradReference(xs [][]float32, scale float64, owner []float32) (out []float32, resid [][]float32, ownerOut []float32) {
	size, n := len(xs), len(xs[0])
	out, ownerOut = make([]float32, n), make([]float32, n)
	resid = make([][]float32, size)
	for r := range resid {
		resid[r] = make([]float32, n)
	}
	lo := 0
	for c := range size {
		m := n / size
		if c < n%size {
			m++
		}
		sum := make([]float64, m)
		for r, x := range xs {
			q := make([]byte, m)
			mn, mx, _ := QuantizeMinMaxUint8(x[lo:lo+m], q)
			d := make([]float32, m)
			DequantizeMinMaxUint8(q, mn, mx, d)
			for i := range d {
				sum[i] += float64(d[i])
				resid[r][lo+i] = x[lo+i] - d[i]
			}
		}
		mean := make([]float32, m)
		for i, v := range sum {
			mean[i] = float32(v * scale)
			if owner != nil {
				mean[i] += owner[lo+i]
			}
		}
		q := make([]byte, m)
		mn, mx, _ := QuantizeMinMaxUint8(mean, q)
		DequantizeMinMaxUint8(q, mn, mx, out[lo:lo+m])
		for i := range mean {
			ownerOut[lo+i] = mean[i] - out[lo+i]
		}
		lo += m
	}
	return out, resid, ownerOut
}

// byteGradModel tracks the reference of every rank through steps of
// psgdParams' gradients (psgdGrad) in the buckets given (parameter
// indices, backward order).
type byteGradModel struct {
	size     int
	buckets  [][]int
	feedback bool
	resid    [][][]float32 // per bucket, per rank
	owner    [][]float32   // per bucket
	scale    float64       // of the sum: 1/size (Average) when 0
}

// step returns, per parameter, the gradient every rank holds after
// ByteGrad's exchange of step's gradients.
func (m *byteGradModel) step(step int) [][]float64 {
	got := make([][]float64, len(psgdShapes))
	if m.resid == nil {
		m.resid = make([][][]float32, len(m.buckets))
		m.owner = make([][]float32, len(m.buckets))
	}
	for b, members := range m.buckets {
		xs := make([][]float32, m.size)
		for r := range m.size {
			for _, i := range members {
				for _, v := range psgdGrad(r, step, i) {
					xs[r] = append(xs[r], float32(v))
				}
			}
			if m.feedback && m.resid[b] != nil {
				for k := range xs[r] {
					xs[r][k] += m.resid[b][r][k]
				}
			}
		}
		scale := m.scale
		if scale == 0 {
			scale = 1 / float64(m.size)
		}
		out, resid, owner := byteGradReference(xs, scale, m.owner[b])
		if m.feedback {
			m.resid[b], m.owner[b] = resid, owner
		}
		off := 0
		for _, i := range members {
			n := len(psgdGrad(0, 0, i))
			got[i] = make([]float64, n)
			for k := range n {
				got[i][k] = float64(out[off+k])
			}
			off += n
		}
	}
	return got
}

// byteGradLayouts are the bucket layouts tested: one bucket of every
// gradient in backward order, and one bucket per gradient.
var byteGradLayouts = []struct {
	name    string
	opt     DistOption
	buckets [][]int
}{
	{"one-bucket", BucketBytes(1 << 30), [][]int{{5, 4, 3, 2, 1, 0}}},
	{"per-gradient", BucketBytes(1), [][]int{{5}, {4}, {3}, {2}, {1}, {0}}},
}

// byteGradRun runs steps of ByteGrad (with or without error feedback) on
// rank of coll and checks, every step, that the synchronized gradients
// are bit for bit the reference's, and that sent() (the runtime's
// SentBytes, or nil) grew by the exchange's bytes.
func byteGradRun(ctx context.Context, coll Collectives, rank, steps int, feedback bool, sent func() int64) error {
	size := coll.Size()
	for _, lay := range byteGradLayouts {
		h := NewByteGrad(ByteGradConfig{ErrorFeedback: feedback})
		sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.01, Momentum: 0.9})
		if err != nil {
			return err
		}
		opt, err := NewDistributed(sgd, coll, WithCommHook(h), lay.opt)
		if err != nil {
			return err
		}
		ref := &byteGradModel{size: size, buckets: lay.buckets, feedback: feedback}
		for s := range steps {
			want := ref.step(s)
			var before int64
			if sent != nil {
				before = sent()
			}
			check := func() error {
				for i, p := range opt.Params() {
					for k, v := range asFloat64s(p.Grad) {
						if v != want[i][k] {
							return fmt.Errorf("%s %s[%d] = %g, reference %g", lay.name, p.Name, k, v, want[i][k])
						}
					}
				}
				return nil
			}
			if err := psgdStep(ctx, opt, rank, s, check); err != nil {
				opt.Close()
				return err
			}
			if sent != nil {
				if got, want := sent()-before, byteGradBytes(lay.buckets, size, rank); got != want {
					opt.Close()
					return fmt.Errorf("%s step %d: sent %d bytes, want %d", lay.name, s, got, want)
				}
			}
		}
		if feedback {
			if st := h.HookState(); len(st.Tensors) != 2*len(psgdShapes) {
				opt.Close()
				return fmt.Errorf("%s: %d residuals in the hook's state, want %d", lay.name, len(st.Tensors), len(psgdShapes))
			}
		}
		if err := opt.Close(); err != nil {
			return err
		}
	}
	return nil
}

// byteGradBytes is what rank sends per step: per bucket of N values, the
// alltoall's chunks for the other ranks with their headers, then its own
// chunk with its header to each of the other ranks.
func byteGradBytes(buckets [][]int, size, rank int) int64 {
	var b int64
	for _, members := range buckets {
		n := 0
		for _, i := range members {
			n += len(psgdGrad(0, 0, i))
		}
		lo, hi := ShardRange(n, size, rank)
		b += int64(n - (hi - lo) + (size-1)*chunkHeader)
		b += int64((size - 1) * (chunkHeader + hi - lo))
	}
	return b
}

// TestByteGradReference: over the runtime's in-memory transport at 2, 3
// and 4 ranks (uneven chunks), with and without error feedback, ByteGrad
// leaves on every rank the reference's gradients bit for bit and sends
// the bytes of the formula, as the runtime counts them.
func TestByteGradReference(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		for _, fb := range []bool{false, true} {
			t.Run(fmt.Sprintf("np%d/feedback=%v", n, fb), func(t *testing.T) {
				rts := startRuntimes(t, n)
				onColls(t, rts, func(ctx context.Context, coll Collectives, rank int) error {
					return byteGradRun(ctx, coll, rank, 3, fb, func() int64 { return rts[rank].Stats().SentBytes })
				})
			})
		}
	}
}

// TestByteGradEmbedded is TestByteGradReference over the embedded
// transport (sockets between ranks in this process).
func TestByteGradEmbedded(t *testing.T) {
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts := startEmbedded(t, n)
			onColls(t, rts, func(ctx context.Context, coll Collectives, rank int) error {
				return byteGradRun(ctx, coll, rank, 2, true, func() int64 { return rts[rank].Stats().SentBytes })
			})
		})
	}
}

// TestByteGradSumScaled: with op Sum the exchange sums (the reference's
// scale 1), and with a gradient predivide factor f (prescale 1/f,
// postscale f) it averages, bit for bit.
func TestByteGradSumScaled(t *testing.T) {
	const n = 3
	onColls(t, startRuntimes(t, n), func(ctx context.Context, coll Collectives, rank int) error {
		for _, c := range []struct {
			opt   DistOption
			scale float64
		}{{WithOp(Sum), 1}, {GradientPredivideFactor(2), 1.0 / n}} {
			opts, scale := []DistOption{c.opt}, c.scale
			sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.01})
			if err != nil {
				return err
			}
			opt, err := NewDistributed(sgd, coll, append(opts, WithCommHook(NewByteGrad(ByteGradConfig{})), BucketBytes(1<<30))...)
			if err != nil {
				return err
			}
			ref := &byteGradModel{size: n, buckets: byteGradLayouts[0].buckets, scale: scale}
			want := ref.step(0)
			err = psgdStep(ctx, opt, rank, 0, func() error {
				for i, p := range opt.Params() {
					for k, v := range asFloat64s(p.Grad) {
						if v != want[i][k] {
							return fmt.Errorf("%s[%d] = %g, reference %g", p.Name, k, v, want[i][k])
						}
					}
				}
				return nil
			})
			opt.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// TestByteGradErrorFeedback: the residual is what quantization lost, so
// that over steps the sum of the exchanged gradients follows the sum of
// the true means more closely with feedback than without.
func TestByteGradErrorFeedback(t *testing.T) {
	const size, steps = 3, 30
	drift := func(feedback bool) float64 {
		m := &byteGradModel{size: size, buckets: [][]int{{5, 4, 3, 2, 1, 0}}, feedback: feedback}
		var worst float64
		sumGot := make([][]float64, len(psgdShapes))
		sumWant := make([][]float64, len(psgdShapes))
		for s := range steps {
			got := m.step(s)
			for i := range psgdShapes {
				want := psgdMean(size, s, i)
				if sumGot[i] == nil {
					sumGot[i], sumWant[i] = make([]float64, len(want)), make([]float64, len(want))
				}
				for k := range want {
					sumGot[i][k] += got[i][k]
					sumWant[i][k] += want[k]
				}
			}
		}
		for i := range sumGot {
			for k := range sumGot[i] {
				worst = math.Max(worst, math.Abs(sumGot[i][k]-sumWant[i][k]))
			}
		}
		return worst
	}
	with, without := drift(true), drift(false)
	if !(with < without/2) {
		t.Fatalf("accumulated error after %d steps: %g with feedback, %g without: feedback should at least halve it", steps, with, without)
	}
}

// TestByteGradNotFinite: a NaN in one rank's gradient fails the step on
// every rank with ErrNotFinite naming that rank, after both collectives
// ran (nothing hangs), and the next step works.
func TestByteGradNotFinite(t *testing.T) {
	const n = 3
	onColls(t, startRuntimes(t, n), func(ctx context.Context, coll Collectives, rank int) error {
		sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.01})
		if err != nil {
			return err
		}
		opt, err := NewDistributed(sgd, coll, WithCommHook(NewByteGrad(ByteGradConfig{})))
		if err != nil {
			return err
		}
		defer opt.Close()
		ps := opt.Params()
		for i := len(ps) - 1; i >= 0; i-- {
			setFloat64s(ps[i].Grad, psgdGrad(rank, 0, i))
			if rank == 1 && i == 2 {
				ps[i].Grad.Float64s()[7] = math.NaN()
			}
			if err := opt.Ready(ps[i]); err != nil {
				return err
			}
		}
		err = opt.Synchronize(ctx)
		if !errors.Is(err, ErrNotFinite) || !containsAll(err.Error(), "on rank 1") {
			return fmt.Errorf("Synchronize: %v, want ErrNotFinite on rank 1", err)
		}
		return psgdStep(ctx, opt, rank, 1, nil)
	})
}

// TestByteGradErrors: a Collectives without alltoall is refused at the
// first Start, as is an op other than Average or Sum at NewDistributed.
func TestByteGradErrors(t *testing.T) {
	sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewDistributed(sgd, groupColls(1)[0], WithCommHook(NewByteGrad(ByteGradConfig{})), WithOp(Adasum)); err == nil || !containsAll(err.Error(), "ByteGrad", "Average") {
		t.Fatalf("Adasum: %v", err)
	}
	opt, err := NewDistributed(sgd, plain{groupColls(1)[0]}, WithCommHook(NewByteGrad(ByteGradConfig{})))
	if err != nil {
		t.Fatal(err)
	}
	defer opt.Close()
	if err := psgdStep(context.Background(), opt, 0, 0, nil); err == nil || !containsAll(err.Error(), "Alltoall") {
		t.Fatalf("without alltoall: %v", err)
	}
}

// TestByteGradStateRestore: with error feedback, the residuals travel in
// the DistributedOptimizer's State: an optimizer restored from the state
// (and the parameters) after 2 steps takes steps 3 and 4 exactly as the
// uninterrupted one; a state tensor of an unknown slot is refused.
func TestByteGradStateRestore(t *testing.T) {
	const n = 3
	onColls(t, startRuntimes(t, n), func(ctx context.Context, coll Collectives, rank int) error {
		newOpt := func() (*DistributedOptimizer, error) {
			sgd, err := NewSGD(psgdParams(), SGDConfig{LR: 0.01, Momentum: 0.9})
			if err != nil {
				return nil, err
			}
			return NewDistributed(sgd, coll, WithCommHook(NewByteGrad(ByteGradConfig{ErrorFeedback: true})))
		}
		run := func(opt *DistributedOptimizer, from, to int) error {
			for s := from; s < to; s++ {
				if err := psgdStep(ctx, opt, rank, s, nil); err != nil {
					return err
				}
			}
			return nil
		}
		whole, err := newOpt()
		if err != nil {
			return err
		}
		defer whole.Close()
		if err := run(whole, 0, 2); err != nil {
			return err
		}
		st, values := whole.State(), snapshotValues(whole.Params())
		if n := len(st.Tensors); n == 0 {
			return errors.New("no state")
		}
		if err := run(whole, 2, 4); err != nil {
			return err
		}
		restored, err := newOpt()
		if err != nil {
			return err
		}
		defer restored.Close()
		bad := st.Clone()
		bad.Tensors[SlotKey("fc1.bias", "bytegrad.bogus")] = bad.Tensors[SlotKey("fc1.bias", "bytegrad.residual")]
		if err := restored.SetState(bad); err == nil || !containsAll(err.Error(), "bytegrad.bogus") {
			return fmt.Errorf("a state with an unknown slot: %v", err)
		}
		for i, p := range restored.Params() {
			copy(p.Value.Bytes(), values[i])
		}
		if err := restored.SetState(st); err != nil {
			return err
		}
		if err := run(restored, 2, 4); err != nil {
			return err
		}
		want := snapshotValues(whole.Params())
		for i, got := range snapshotValues(restored.Params()) {
			if !slices.Equal(got, want[i]) {
				return fmt.Errorf("%s differs after the restored steps", psgdShapes[i].name)
			}
		}
		return nil
	})
}

// TestByteGradCodecRanks runs the exchange's pure steps for n simulated
// ranks in one goroutine (encode, the alltoall's routing, reduce, the
// allgather's concatenation, decode) and checks them bit for bit against
// byteGradReference, with and without error feedback, for vectors whose
// length does not divide by n (and one shorter than n).
func TestByteGradCodecRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{1, 2, 3, 4} {
		for _, size := range []int{n - 1, 7, 1001} {
			if size < 1 {
				continue
			}
			xs := make([][]float32, n)
			for r := range xs {
				xs[r] = make([]float32, size)
				for k := range xs[r] {
					xs[r][k] = float32(rng.NormFloat64() * float64(r+1))
				}
			}
			owner := make([]float32, size)
			for k := range owner {
				owner[k] = float32(rng.NormFloat64() * 1e-3)
			}
			want, wantRes, wantOwner := byteGradReference(xs, 1/float64(n), owner)
			got, res, ownerOut := simulateByteGrad(t, xs, owner)
			for r := range n {
				if !slices.Equal(got[r], want) || !slices.Equal(res[r], wantRes[r]) {
					t.Fatalf("n %d size %d rank %d: the exchange or the residual differs from the reference", n, size, r)
				}
				lo, hi := ShardRange(size, n, r)
				if !slices.Equal(ownerOut[r][lo:hi], wantOwner[lo:hi]) {
					t.Fatalf("n %d size %d rank %d: the owner's residual differs from the reference", n, size, r)
				}
			}
		}
	}
}

// simulateByteGrad is byteGradExchange for len(xs) ranks in one
// goroutine, each rank's owner residual from owner.
func simulateByteGrad(t *testing.T, xs [][]float32, owner []float32) (out, local, ownerOut [][]float32) {
	n, size := len(xs), len(xs[0])
	wires := make([][]byte, n)
	out, local, ownerOut = make([][]float32, n), make([][]float32, n), make([][]float32, n)
	for r := range n {
		p := byteGradPlan{n: size, size: n, rank: r}
		wires[r] = make([]byte, size+n*chunkHeader)
		local[r] = make([]float32, size)
		if err := p.encode(xs[r], wires[r], local[r]); err != nil {
			t.Fatal(err)
		}
	}
	var gathered []byte
	for r := range n {
		p := byteGradPlan{n: size, size: n, rank: r}
		// What the alltoall delivers to r: block r of every rank's wire.
		var got []byte
		for s := range n {
			off := 0
			for q, sp := range p.splits() {
				if q == r {
					got = append(got, wires[s][off:off+sp]...)
				}
				off += sp
			}
		}
		lo, hi := p.chunk(r)
		mine := make([]byte, chunkHeader+hi-lo)
		ownerOut[r] = make([]float32, size)
		fb := &byteGradFeedback{local: local[r], ownerIn: owner, ownerOut: ownerOut[r]}
		if err := p.reduce(got, 1/float64(n), mine, fb); err != nil {
			t.Fatal(err)
		}
		gathered = append(gathered, mine...)
	}
	for r := range n {
		out[r] = make([]float32, size)
		if err := (byteGradPlan{n: size, size: n, rank: r}).decode(gathered, out[r]); err != nil {
			t.Fatal(err)
		}
	}
	return out, local, ownerOut
}
