package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
	"github.com/gohorovod/gohorovod/runtime/config"
)

// runNP2 runs o at np 2 on the in-memory group and returns rank 0's output
// and the ranks' errors.
func runNP2(o options) (string, error) {
	var outs [2]bytes.Buffer
	err := hvd.RunLocal(2, func(r *hvd.Runtime, rank int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		return run(ctx, o, r, &outs[rank])
	}, hvd.WithConfig(config.Default()), hvd.WithLogger(zerolog.Nop()))
	return outs[0].String(), err
}

var finalVars = regexp.MustCompile(`variables: fnv-1a [0-9a-f]{16} after 20 steps`)

// TestCheckpointResume trains the CNN at np 2 with --checkpoint-dir for 2
// epochs of 10 steps (640 images, 32 per rank and step, a checkpoint every
// 3 steps), once uninterrupted and once stopped at step 14, in epoch 2,
// then started again: the second run resumes from step 12 (epoch 2) and
// ends with the uninterrupted run's variables (model, Adam's state, global
// step), bit for bit.
func TestCheckpointResume(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on MNIST")
	}
	if raceDetector {
		t.Skip("the race detector slows GoMLX's kernels about fortyfold; make test-adapters runs this test without it")
	}
	args := []string{"--epochs", "2", "--train-limit", "640", "--test-limit", "200", "--threads", "1", "--batch", "32", "--checkpoint-every", "3"}
	o, err := parse(append(args, "--checkpoint-dir", t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := runNP2(o)
	if err != nil {
		t.Fatalf("%v\n%s", err, whole)
	}
	if !finalVars.MatchString(whole) {
		t.Fatalf("no final variables:\n%s", whole)
	}
	o.ckptDir = t.TempDir()
	o.stopAt = 14
	if out, err := runNP2(o); !errors.Is(err, errStopped) {
		t.Fatalf("stopped run: %v\n%s", err, out)
	}
	o.stopAt = 0
	again, err := runNP2(o)
	if err != nil {
		t.Fatalf("%v\n%s", err, again)
	}
	t.Log(again)
	if !strings.Contains(again, "resumed from step 12 (epoch 2)") {
		t.Fatalf("did not resume from step 12:\n%s", again)
	}
	if got, want := finalVars.FindString(again), finalVars.FindString(whole); got != want {
		t.Fatalf("the resumed run ended with %q, the uninterrupted one with %q", got, want)
	}
}
