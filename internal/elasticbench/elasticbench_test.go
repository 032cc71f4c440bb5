package elasticbench

import "testing"

func TestSizes(t *testing.T) {
	m, err := NewMNIST([]int{8}, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	// 784·8+8 + 8·10+10 parameters, and as much momentum.
	if got, want := m.NumParams(), 6370; got != want {
		t.Errorf("NumParams = %d, want %d", got, want)
	}
	if got, want := m.SnapshotBytes(), 2*4*6370; got != want {
		t.Errorf("MNIST SnapshotBytes = %d, want %d", got, want)
	}
	b, err := NewBig(1<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.SnapshotBytes(); got != 1<<20 {
		t.Errorf("Big SnapshotBytes = %d, want %d", got, 1<<20)
	}
	for _, c := range []struct{ total, tensors int }{{1 << 20, 3}, {8, 2}, {64, 0}} {
		if _, err := NewBig(c.total, c.tensors); err == nil {
			t.Errorf("NewBig(%d, %d) accepted", c.total, c.tensors)
		}
	}
	if _, err := NewMNIST([]int{0}, 4, 1); err == nil {
		t.Error("a hidden width of 0 was accepted")
	}
}

// TestStepCommitRestore checks that the MNIST state is what a commit
// snapshots: after a commit and more steps, Restore returns the weights,
// the batch counter and the sampler's position to the commit's.
func TestStepCommitRestore(t *testing.T) {
	m, err := NewMNIST([]int{8}, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Step(); err != nil {
		t.Fatal(err)
	}
	if err := m.State.Commit(); err != nil {
		t.Fatal(err)
	}
	w := append([]float32(nil), m.Opt.Params()[0].Value.Float32s()...)
	pos := m.Sampler.Processed()
	for range 2 {
		if err := m.Step(); err != nil {
			t.Fatal(err)
		}
	}
	if m.Opt.Params()[0].Value.Float32s()[0] == w[0] && m.Batch == 1 {
		t.Fatal("the steps changed nothing")
	}
	if err := m.State.Restore(); err != nil {
		t.Fatal(err)
	}
	got := m.Opt.Params()[0].Value.Float32s()
	for i := range w {
		if got[i] != w[i] {
			t.Fatalf("weight %d = %g after Restore, want %g", i, got[i], w[i])
		}
	}
	if m.Batch != 1 || m.Sampler.Processed() != pos || pos != 4 {
		t.Errorf("after Restore: batch %d, position %d (committed %d), want 1 and 4", m.Batch, m.Sampler.Processed(), pos)
	}
}
