package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestAlgorithms trains one epoch on the first 12,000 images at np 2 on
// the in-memory group with each --algorithm and --zero: the model learns,
// both ranks end with identical parameters, and the bytes sent per step
// (the runtime's count) are about a quarter of fp32 allreduce's with the
// 8-bit exchanges and what the stage's collectives send with ZeRO.
func TestAlgorithms(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	const n, params = 2, 235146
	allreduce := float64(4*params*2*(n-1)/n) / 1024 // KiB per step
	cases := []struct {
		args     []string
		min, max float64 // KiB sent per step
	}{
		{[]string{"--algorithm", "bytegrad"}, 0.24 * allreduce, 0.27 * allreduce},
		// (--error-feedback sends the same bytes; optim's tests cover it.)
		// 47 warm-up steps of the 94 allreduce; the rest exchange 8 bits.
		{[]string{"--algorithm", "qadam", "--qadam-warmup", "47"}, 0.6 * allreduce, 0.65 * allreduce},
		// Stage 1: the allreduce, then the allgather of half the values.
		{[]string{"--zero", "1"}, 1.49 * allreduce, 1.51 * allreduce},
		// Stage 2: the reducescatter and the allgather, each half an allreduce.
		{[]string{"--zero", "2"}, 0.99 * allreduce, 1.01 * allreduce},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			res, outs := trainLocal(t, n, append([]string{"--epochs", "1", "--train-limit", "12000", "--warmup-epochs", "0.5"}, c.args...)...)
			out := outs[0].String()
			t.Log(out)
			if res[0].checksum != res[1].checksum {
				t.Fatal("ranks ended with different parameters")
			}
			if res[0].accuracy < 0.9 {
				t.Fatalf("test accuracy %.3f after one epoch on 12,000 images", res[0].accuracy)
			}
			m := regexp.MustCompile(` (\d+) KiB sent/step`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no sent/step figure in %q", out)
			}
			sent, _ := strconv.ParseFloat(m[1], 64)
			if sent < c.min || sent > c.max {
				t.Fatalf("%v KiB sent per step, want %.0f to %.0f (fp32 allreduce: %.0f)", sent, c.min, c.max, allreduce)
			}
		})
	}
}

// TestParseAlgorithm: --algorithm, --zero and the flags they do not
// combine with are checked; QAdam's default rate is Adam's.
func TestParseAlgorithm(t *testing.T) {
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--algorithm", "gradient_allreduce"}, true},
		{[]string{"--algorithm", "bytegrad", "--error-feedback"}, true},
		{[]string{"--algorithm", "qadam", "--qadam-warmup", "10"}, true},
		{[]string{"--algorithm", "qadam", "--qadam-warmup", "0"}, false},
		{[]string{"--algorithm", "qadam", "--qadam-eps", "0"}, false},
		{[]string{"--algorithm", "decentralised"}, false},
		{[]string{"--error-feedback"}, false},
		{[]string{"--zero", "1"}, true},
		{[]string{"--zero", "2"}, true},
		{[]string{"--zero", "3"}, false},
		{[]string{"--zero", "1", "--algorithm", "bytegrad"}, false},
		{[]string{"--zero", "1", "--compression", "fp16"}, false},
		{[]string{"--algorithm", "bytegrad", "--powersgd-rank", "2"}, false},
		{[]string{"--algorithm", "qadam", "--local-sgd-start", "10"}, false},
		{[]string{"--zero", "2", "--elastic"}, false},
	} {
		if _, err := parse(c.args); (err == nil) != c.ok {
			t.Errorf("parse(%q): %v", c.args, err)
		}
	}
	for _, c := range []struct {
		args []string
		lr   float64
	}{{[]string{"--algorithm", "qadam"}, 0.001}, {[]string{"--algorithm", "qadam", "--lr", "0.01"}, 0.01}, {nil, 0.05}} {
		if o, err := parse(c.args); err != nil || o.lr != c.lr {
			t.Errorf("parse(%q): lr %v (%v), want %v", c.args, o.lr, err, c.lr)
		}
	}
	err := fmt.Sprint(parse([]string{"--algorithm", "x"}))
	for _, name := range []string{"async", "bytegrad", "decentralized", "gradient_allreduce", "low_precision_decentralized", "qadam"} {
		if !strings.Contains(err, name) {
			t.Errorf("the unknown --algorithm's error does not list %s: %s", name, err)
		}
	}
}
