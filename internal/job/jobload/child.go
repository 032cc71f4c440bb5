package jobload

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/fdlimit"
)

// Kind is what the clients meet through.
type Kind string

// The kinds.
const (
	KindRendezvous Kind = "rendezvous"
	KindStore      Kind = "store"
)

// The child's environment: its kind, the server's address, the number of
// clients, the key (hex; the rendezvous only), the timeout of each client.
const (
	envKind    = "GOHOROVOD_JOBLOAD_CHILD"
	envAddr    = "GOHOROVOD_JOBLOAD_ADDR"
	envN       = "GOHOROVOD_JOBLOAD_N"
	envKey     = "GOHOROVOD_JOBLOAD_KEY"
	envTimeout = "GOHOROVOD_JOBLOAD_TIMEOUT"
	// EnvProfile, when set, names a file for the clients' process's CPU
	// profile: where their time goes.
	EnvProfile = "GOHOROVOD_JOBLOAD_CLIENT_PROFILE"
)

// resultTag starts the child's line with its Result.
const resultTag = "jobload-result: "

// Run is one run of clients in a child process.
type Run struct {
	Kind    Kind
	Addr    string        // the server's "127.0.0.1:port"
	N       int           // clients
	Key     []byte        // the job's secret (rendezvous)
	Timeout time.Duration // each client's deadline; the child is killed a little later
}

// Spawn runs r's clients in a new process: this test binary again, whose
// TestMain must call ChildMain first. It returns their Result, or an error
// when the child itself failed (its stderr included).
func Spawn(ctx context.Context, r Run) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, r.Timeout+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envKind+"="+string(r.Kind), envAddr+"="+r.Addr, envN+"="+strconv.Itoa(r.N),
		envKey+"="+hex.EncodeToString(r.Key), envTimeout+"="+r.Timeout.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	_, line, found := strings.Cut(stdout.String(), resultTag)
	if err != nil || !found {
		return Result{}, fmt.Errorf("jobload: the clients' process: %v (no result); its stderr: %s", err, tail(stderr.String()))
	}
	var res Result
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return Result{}, fmt.Errorf("jobload: the clients' result %q: %w", line, err)
	}
	return res, nil
}

func tail(s string) string {
	if len(s) > 4000 {
		return "..." + s[len(s)-4000:]
	}
	return s
}

// ChildMain runs the clients when this process was started by Spawn, and
// exits; otherwise it returns at once. Call it first in TestMain.
func ChildMain() {
	kind := Kind(os.Getenv(envKind))
	if kind == "" {
		return
	}
	clientsMain(kind)
	os.Exit(0)
}

// clientsMain runs the clients of kind and prints their Result.
func clientsMain(kind Kind) {
	if path := os.Getenv(EnvProfile); path != "" {
		if f, err := os.Create(path); err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	res, err := child(kind)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jobload:", err)
		os.Exit(1)
	}
	b, _ := json.Marshal(res)
	fmt.Printf("%s%s\n", resultTag, b)
}

func child(kind Kind) (Result, error) {
	n, err := strconv.Atoi(os.Getenv(envN))
	if err != nil || n <= 0 {
		return Result{}, fmt.Errorf("%s=%q: not a number of clients", envN, os.Getenv(envN))
	}
	timeout, err := time.ParseDuration(os.Getenv(envTimeout))
	if err != nil {
		return Result{}, err
	}
	key, err := hex.DecodeString(os.Getenv(envKey))
	if err != nil {
		return Result{}, err
	}
	if _, err := fdlimit.Ensure(fmt.Sprintf("%d clients", n), uint64(n)); err != nil {
		return Result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	addr := os.Getenv(envAddr)
	switch kind {
	case KindRendezvous:
		return RunRendezvous(ctx, addr, key, n), nil
	case KindStore:
		return RunStore(ctx, addr, "jobload", n), nil
	}
	return Result{}, errors.New("unknown kind " + string(kind))
}
