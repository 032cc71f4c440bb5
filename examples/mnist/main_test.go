package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

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
	cfg := config.Default()
	o, err := parse([]string{"--epochs", "1", "--train-limit", "12000", "--warmup-epochs", "0.5"})
	if err != nil {
		t.Fatal(err)
	}
	res := make([]result, n)
	outs := make([]bytes.Buffer, n)
	err = hvd.RunLocal(n, func(r *hvd.Runtime, rank int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var err error
		res[rank], err = run(ctx, o, r, &outs[rank])
		return err
	}, hvd.WithConfig(cfg), hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	if res[0].checksum != res[1].checksum {
		t.Fatal("ranks ended with different parameters")
	}
	if res[0].accuracy < 0.9 {
		t.Fatalf("test accuracy %.3f after one epoch on 12,000 images", res[0].accuracy)
	}
	if !strings.Contains(outs[0].String(), "epoch 1:") || outs[1].Len() != 0 {
		t.Fatalf("rank 0 printed %q, rank 1 %q", outs[0].String(), outs[1].String())
	}
	t.Log(outs[0].String())
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
	var res result
	var out bytes.Buffer
	err = hvd.RunLocal(1, func(r *hvd.Runtime, _ int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var err error
		res, err = runElastic(ctx, o, r, &out)
		return err
	}, hvd.WithConfig(config.Default()), hvd.WithLogger(zerolog.Nop()))
	if err != nil {
		t.Fatal(err)
	}
	t.Log(out.String())
	if res.accuracy < 0.8 { // 84.9% with these settings
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
	}
	for _, c := range cases {
		_, err := parse(c.args)
		if (err == nil) != c.ok {
			t.Errorf("parse(%q): %v", c.args, err)
		}
	}
}
