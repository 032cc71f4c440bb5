package main

import (
	"strings"
	"testing"
)

// TestWeightAlgorithms trains at np 2 on the in-memory group (one epoch on
// the first 12,000 images) with each weight-exchanging algorithm: the model
// learns, the ranks end with the same parameters (the mean kept after the
// last epoch), and rank 0 prints the bytes sent per step beside the
// accuracy. The full-data figures are in docs/BENCHMARKS.md.
func TestWeightAlgorithms(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	for _, args := range [][]string{
		{"--algorithm", "decentralized"},
		{"--algorithm", "decentralized", "--peer-selection", "shift_one", "--communication-interval", "2"},
		{"--algorithm", "low_precision_decentralized"},
		{"--algorithm", "async", "--async-interval-ms", "5"},
	} {
		t.Run(strings.Join(args[1:], " "), func(t *testing.T) {
			res, outs := trainLocal(t, 2, append(args, "--epochs", "1", "--train-limit", "12000", "--warmup-epochs", "0.5")...)
			t.Log(outs[0].String())
			if res[0].checksum != res[1].checksum {
				t.Fatal("ranks ended with different parameters")
			}
			if res[0].accuracy < 0.9 {
				t.Fatalf("test accuracy %.3f after one epoch on 12,000 images", res[0].accuracy)
			}
			if !strings.Contains(outs[0].String(), "KiB sent/step") || strings.Contains(outs[0].String(), " 0.0 KiB sent/step") {
				t.Errorf("rank 0 printed no bytes sent per step: %q", outs[0].String())
			}
		})
	}
}

func TestAlgorithmFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--algorithm", "gossip"}, "unknown --algorithm"},
		{[]string{"--algorithm", "decentralized", "--peer-selection", "ring"}, "unknown --peer-selection"},
		{[]string{"--algorithm", "decentralized", "--communication-interval", "0"}, "--communication-interval 0"},
		{[]string{"--algorithm", "async", "--async-interval-ms", "0"}, "--async-interval-ms 0"},
		{[]string{"--algorithm", "low_precision_decentralized", "--batchnorm", "sync"}, "takes none of"},
	} {
		if _, err := parse(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
	if o, err := parse(nil); err != nil || o.alg.weights() {
		t.Fatalf("default: %v, weights %v; want gradient_allreduce", err, o.alg.weights())
	}
}
