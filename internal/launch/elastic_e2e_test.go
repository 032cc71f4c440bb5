package launch_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Elastic training end to end: gohorovodrun's elastic driver
// with the test worker's elastic mode (testdata/worker/elastic.go), on
// this machine, with hosts as distinct names of it (localhost, 127.0.0.1,
// *.localhost), as Horovod's own integration tests do.

// elasticRun is one elastic job's output.
type elasticRun struct {
	stdout, stderr string
	err            error
	took           time.Duration
}

// record is one parsed line of the worker: its kind and key=value fields.
type record struct {
	slot string // the launcher's tag: host[local]
	kind string
	f    map[string]string
}

func (r record) int(k string) int {
	v, err := strconv.Atoi(r.f[k])
	if err != nil {
		panic(fmt.Sprintf("field %s of %+v: %v", k, r, err))
	}
	return v
}

var tagRE = regexp.MustCompile(`^\[([^\]]+\[\d+\])\]<stdout>:(.*)$`)

func parseRecords(t *testing.T, out string) []record {
	t.Helper()
	var recs []record
	for _, line := range strings.Split(out, "\n") {
		m := tagRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		fields := strings.Fields(m[2])
		if len(fields) == 0 {
			continue
		}
		r := record{slot: m[1], kind: fields[0], f: map[string]string{}}
		for _, kv := range fields[1:] {
			k, v, _ := strings.Cut(kv, "=")
			r.f[k] = v
		}
		recs = append(recs, r)
	}
	return recs
}

// runElastic runs gohorovodrun with args and the worker's elastic mode
// with wargs; onLine, when not nil, sees every stdout line as it comes.
func runElastic(t *testing.T, args, wargs []string, onLine func(string)) elasticRun {
	t.Helper()
	launcher, worker := build(t)
	all := append(append(append([]string(nil), args...), worker, "elastic"), wargs...)
	cmd := exec.Command(launcher, all...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A job that does not end is killed, so that the test fails instead
	// of hanging in the read below.
	watchdog := time.AfterFunc(90*time.Second, func() { cmd.Process.Kill() })
	defer watchdog.Stop()
	var stdout bytes.Buffer
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		stdout.WriteString(sc.Text() + "\n")
		if onLine != nil {
			onLine(sc.Text())
		}
	}
	_, _ = io.Copy(io.Discard, pipe)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	werr := <-done
	if !watchdog.Stop() {
		t.Fatalf("gohorovodrun %v did not end within 90 s\nstdout:\n%s\nstderr:\n%s", args, stdout.String(), stderr.String())
	}
	return elasticRun{stdout: stdout.String(), stderr: stderr.String(), err: werr, took: time.Since(start)}
}

// rounds returns the sizes of the rendezvous rounds the launcher logged.
func rounds(t *testing.T, stderr string) []int {
	t.Helper()
	var sizes []int
	re := regexp.MustCompile(`gohorovodrun: elastic: rendezvous round (\d+): (\d+) workers`)
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		id, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		if id != len(sizes)+1 {
			t.Fatalf("round %d logged after %d rounds", id, len(sizes))
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// checkCoverage proves from the workers' records that every epoch
// processed each of the n samples exactly once in the steps the job kept:
// a step is kept when a later round resumed past it (or it belongs to the
// last round). It returns the group size of the kept steps per epoch.
func checkCoverage(t *testing.T, recs []record, n, epochs int) map[int][]int {
	t.Helper()
	// resume[R] is where round R started: (epoch, pos) on its rank 0.
	type point struct{ epoch, pos int }
	resume := map[int]point{}
	last := 0
	for _, r := range recs {
		if r.kind == "resume" && r.f["rank"] == "0" {
			resume[r.int("round")] = point{r.int("epoch"), r.int("pos")}
			last = max(last, r.int("round"))
		}
	}
	less := func(a, b point) bool { return a.epoch < b.epoch || a.epoch == b.epoch && a.pos < b.pos }
	// The next round that resumed after round R bounds the steps R kept.
	bound := func(round int) (point, bool) {
		for q := round + 1; q <= last; q++ {
			if p, ok := resume[q]; ok {
				return p, true
			}
		}
		return point{}, false
	}
	seen := make([]map[int]int, epochs)
	for e := range seen {
		seen[e] = map[int]int{}
	}
	sizes := map[int][]int{}
	for _, r := range recs {
		if r.kind != "step" {
			continue
		}
		p := point{r.int("epoch"), r.int("pos")}
		if b, ok := bound(r.int("round")); ok && !less(p, b) {
			continue // redone after the reset: not kept
		}
		if r.f["rank"] == "0" {
			sizes[p.epoch] = append(sizes[p.epoch], r.int("size"))
		}
		if r.f["idx"] == "" {
			continue
		}
		for _, s := range strings.Split(r.f["idx"], ",") {
			i, _ := strconv.Atoi(s)
			seen[p.epoch][i]++
		}
	}
	for e := range epochs {
		var missing, twice []int
		for i := range n {
			switch seen[e][i] {
			case 0:
				missing = append(missing, i)
			case 1:
			default:
				twice = append(twice, i)
			}
		}
		if len(missing) > 0 || len(twice) > 0 {
			t.Errorf("epoch %d: samples never processed %v, processed more than once %v", e, missing, twice)
		}
	}
	return sizes
}

// recovery is the time from a worker's death to the first step the
// re-formed group completed.
func recovery(t *testing.T, recs []record) time.Duration {
	t.Helper()
	var died, back int64
	for _, r := range recs {
		if r.kind == "dying" && died == 0 {
			died, _ = strconv.ParseInt(r.f["t"], 10, 64)
		}
		if r.kind == "stepped" && died != 0 && back == 0 && r.int("round") > 1 {
			back, _ = strconv.ParseInt(r.f["t"], 10, 64)
		}
	}
	if died == 0 || back == 0 {
		t.Fatalf("no death (%d) or no step after it (%d)", died, back)
	}
	return time.Duration(back - died)
}

// TestE2EElasticKill: SIGKILL one worker mid-epoch
// at np 4; the job finishes at the smaller size from the last commit, with
// no committed sample redone and none skipped, two rendezvous rounds
// (4, then 2). Then its seventh: a fresh job started at np 2 from the
// commit the survivors resumed from ends with bitwise the same weights.
func TestE2EElasticKill(t *testing.T) {
	dump := t.TempDir()
	const n, epochs = 48, 3
	wargs := []string{"-n", fmt.Sprint(n), "-epochs", fmt.Sprint(epochs), "-batch", "3", "-die", "127.0.0.1:1:1:12", "-dump", dump}
	r := runElastic(t, []string{"-np", "4", "--min-np", "2", "-H", "localhost:2,127.0.0.1:2"}, wargs, nil)
	if r.err != nil {
		t.Fatalf("job failed: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	if got := rounds(t, r.stderr); !slices.Equal(got, []int{4, 2}) {
		t.Fatalf("rounds of sizes %v, want [4 2]\n%s", got, r.stderr)
	}
	recs := parseRecords(t, r.stdout)
	sizes := checkCoverage(t, recs, n, epochs)
	t.Logf("group size per kept step, by epoch: %v", sizes)
	if sizes[0][0] != 4 || sizes[epochs-1][0] != 2 {
		t.Fatalf("sizes per epoch %v: want 4 at the start and 2 at the end", sizes)
	}
	var resumed []string
	for _, rec := range recs {
		if rec.kind == "resume" && rec.f["round"] == "2" {
			resumed = append(resumed, rec.slot+" rank "+rec.f["rank"]+" of "+rec.f["size"])
		}
	}
	sort.Strings(resumed)
	if !slices.Equal(resumed, []string{"localhost[0] rank 0 of 2", "localhost[1] rank 1 of 2"}) {
		t.Fatalf("round 2 resumed on %v", resumed)
	}
	t.Logf("recovery, from the kill to the first completed step after the reset: %v", recovery(t, recs))
	final := finalWeights(t, recs)

	// Equivalence: start afresh at np 2 from the state round 2 resumed from.
	r2 := runElastic(t, []string{"-np", "2", "--min-np", "2", "-H", "localhost:2"},
		[]string{"-n", fmt.Sprint(n), "-epochs", fmt.Sprint(epochs), "-batch", "3", "-load", filepath.Join(dump, "resume-2.gob")}, nil)
	if r2.err != nil {
		t.Fatalf("fresh job failed: %v\n%s\n%s", r2.err, r2.stdout, r2.stderr)
	}
	if got := finalWeights(t, parseRecords(t, r2.stdout)); got != final {
		t.Fatalf("after the failure the job ended with weights %s; a fresh np 2 job from the same commit ends with %s", final, got)
	}
}

func finalWeights(t *testing.T, recs []record) string {
	t.Helper()
	for _, r := range recs {
		if r.kind == "final" {
			return r.f["w"]
		}
	}
	t.Fatal("no final weights printed")
	return ""
}

// discovery writes a discovery script that prints the file hosts, and
// returns the script and a function that replaces the file's content.
func discovery(t *testing.T, initial string) (script string, set func(string)) {
	t.Helper()
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	set = func(s string) {
		tmp := hosts + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tmp, hosts); err != nil {
			t.Error(err)
		}
	}
	set(initial)
	script = filepath.Join(dir, "discover.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat "+hosts+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, set
}

// TestE2EElasticHostsAddedRemoved:
// the discovery script's hosts grow from 2 to 4 slots, and the job grows
// at the next commit, its new workers joining through the start-up sync
// without hanging; then the new host goes, and the job is back to 2.
func TestE2EElasticHostsAddedRemoved(t *testing.T) {
	script, set := discovery(t, "localhost:2\n")
	const n, epochs = 120, 6
	var once1, once2 sync.Once
	onLine := func(line string) {
		m := tagRE.FindStringSubmatch(line)
		if m == nil || !strings.HasPrefix(m[2], "stepped ") {
			return
		}
		switch {
		case strings.Contains(m[2], "round=1 epoch=1 "):
			once1.Do(func() { set("localhost:2\n127.0.0.1:2\n") })
		case strings.Contains(m[2], "round=2 epoch=2 "):
			once2.Do(func() { set("localhost:2\n") })
		}
	}
	r := runElastic(t, []string{"-np", "2", "--min-np", "2", "--max-np", "4", "--host-discovery-script", script},
		[]string{"-n", fmt.Sprint(n), "-epochs", fmt.Sprint(epochs), "-batch", "3", "-sleep", "60ms"}, onLine)
	if r.err != nil {
		t.Fatalf("job failed: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	if got := rounds(t, r.stderr); !slices.Equal(got, []int{2, 4, 2}) {
		t.Fatalf("rounds of sizes %v, want [2 4 2]\n%s", got, r.stderr)
	}
	recs := parseRecords(t, r.stdout)
	sizes := checkCoverage(t, recs, n, epochs)
	t.Logf("group size per kept step, by epoch: %v", sizes)
	newcomers := map[string]bool{}
	for _, rec := range recs {
		if strings.HasPrefix(rec.slot, "127.0.0.1[") && rec.kind == "stepped" && rec.f["round"] == "2" {
			newcomers[rec.slot] = true
		}
	}
	if len(newcomers) != 2 {
		t.Fatalf("the added workers stepped in round 2: %v", newcomers)
	}
	if !strings.Contains(r.stderr, "elastic: hosts added") || !strings.Contains(r.stderr, "elastic: hosts removed") {
		t.Fatalf("the launcher did not log the host updates:\n%s", r.stderr)
	}
}

// TestE2EElasticResetLimit, as Horovod's: two
// failures with --reset-limit 1 end the job with Horovod's message and a
// non-zero status; with --reset-limit 2 the same job succeeds.
func TestE2EElasticResetLimit(t *testing.T) {
	hosts := "a.localhost:1,b.localhost:1,c.localhost:1"
	wargs := []string{"-n", "36", "-epochs", "2", "-batch", "3", "-die", "b.localhost:0:0:9:1,c.localhost:0:1:0:2"}
	r := runElastic(t, []string{"-np", "3", "--min-np", "1", "--reset-limit", "1", "-H", hosts}, wargs, nil)
	const want = "Horovod was shutdown because number of resets during elastic job exceeded limit: 1"
	if r.err == nil || !strings.Contains(r.stderr, want) {
		t.Fatalf("got %v, want a failure with %q\n%s", r.err, want, r.stderr)
	}
	r = runElastic(t, []string{"-np", "3", "--min-np", "1", "--reset-limit", "2", "-H", hosts}, wargs, nil)
	if r.err != nil {
		t.Fatalf("with --reset-limit 2: %v\n%s", r.err, r.stderr)
	}
	if got := rounds(t, r.stderr); !slices.Equal(got, []int{3, 2, 1}) {
		t.Fatalf("rounds %v, want [3 2 1]", got)
	}
}

// TestE2EElasticAllFail: every worker failing,
// and every host blacklisted, end the job with a clear error.
func TestE2EElasticAllFail(t *testing.T) {
	// Each fails before it meets the other (two deaths in training race:
	// the second may see the first and reset instead).
	r := runElastic(t, []string{"-np", "2", "--min-np", "2", "--elastic-timeout", "20", "-H", "a.localhost:1,b.localhost:1"},
		[]string{"-fail-at-start", "5"}, nil)
	if r.err == nil || !strings.Contains(r.stderr, "every worker failed") {
		t.Fatalf("every worker failing: %v\n%s", r.err, r.stderr)
	}
	out := t.TempDir()
	r = runElastic(t, []string{"-np", "2", "--min-np", "1", "-H", "localhost:2", "--output-filename", out},
		[]string{"-n", "24", "-epochs", "1", "-die", "localhost:1:0:8"}, nil)
	if r.err == nil || !strings.Contains(r.stderr, "every host of the job is blacklisted") {
		t.Fatalf("every host blacklisted: %v\n%s", r.err, r.stderr)
	}
	// --output-filename: one directory per slot.
	b, err := os.ReadFile(filepath.Join(out, "localhost[1]", "stdout"))
	if err != nil || !strings.Contains(string(b), "dying slot=localhost[1]") {
		t.Fatalf("--output-filename: %v %q", err, b)
	}
}

// TestE2EElasticBelowMinNP (Horovod's deadlock #3494): a
// host removed gracefully leaves fewer slots than --min-np; the survivors
// wait for the elastic timeout, then the job fails clearly instead of
// hanging.
func TestE2EElasticBelowMinNP(t *testing.T) {
	script, set := discovery(t, "localhost:2\n127.0.0.1:2\n")
	var once sync.Once
	onLine := func(line string) {
		if strings.Contains(line, "stepped round=1 epoch=0 pos=8 ") {
			once.Do(func() { set("localhost:2\n") })
		}
	}
	r := runElastic(t, []string{"-np", "4", "--min-np", "4", "--elastic-timeout", "3", "--host-discovery-script", script},
		[]string{"-n", "48", "-epochs", "20", "-batch", "2", "-sleep", "30ms"}, onLine)
	const want = "timed out after 3s waiting for 4 slots (--min-np 4)"
	if r.err == nil || !strings.Contains(r.stderr, want) {
		t.Fatalf("got %v, want a failure with %q\n%s", r.err, want, r.stderr)
	}
	if r.took > 40*time.Second {
		t.Fatalf("the job took %v to fail", r.took)
	}
}

// TestE2EElasticRefusesMPI: a program that calls elastic.Run under mpirun
// (np 2, the -tags mpi worker) fails on every rank with a message saying
// that MPI cannot re-form a running job; the launcher refuses --mpi with
// the elastic flags before starting anything.
func TestE2EElasticRefusesMPI(t *testing.T) {
	launcher, _ := binaries(t)
	worker := mpiWorker(t)
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip("mpirun not on PATH")
	}
	cmd := exec.Command(launcher, "--mpi", "-np", "2", worker, "elastic", "-n", "8", "-epochs", "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	const want = "runs over MPI, which cannot re-form a running job"
	if err == nil || strings.Count(stderr.String(), want) < 1 {
		t.Fatalf("elastic.Run under mpirun: %v\nstdout %s\nstderr %s", err, out, stderr.String())
	}
	cmd = exec.Command(launcher, "--mpi", "-np", "2", "--min-np", "1", worker, "elastic")
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "elastic mode needs the embedded transport") {
		t.Fatalf("gohorovodrun --mpi --min-np: %v\n%s", err, stderr.String())
	}
}

// TestE2EElasticDiscoveryFails: the discovery script's first run fails:
// the job ends at once, with Horovod's message and the script's status.
func TestE2EElasticDiscoveryFails(t *testing.T) {
	script := filepath.Join(t.TempDir(), "discover.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'no quota left' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := runElastic(t, []string{"-np", "2", "--host-discovery-script", script}, nil, nil)
	var ee *exec.ExitError
	if !errors.As(r.err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("got %v, want exit status 3\n%s", r.err, r.stderr)
	}
	want := "Failed to execute discovery script: " + script + ". Exit code: 3: no quota left"
	if !strings.Contains(r.stderr, want) || r.took > 20*time.Second {
		t.Fatalf("stderr lacks %q (took %v):\n%s", want, r.took, r.stderr)
	}
}

// TestE2EElasticFrozen stops one worker with SIGSTOP mid-epoch at np 4:
// alive and silent, it is declared frozen by the heartbeat channel, the
// launcher kills it at the job's report, and the job finishes at the
// smaller size from the last commit, with no committed sample redone and
// none skipped.
func TestE2EElasticFrozen(t *testing.T) {
	const n, epochs = 48, 3
	wargs := []string{"-n", fmt.Sprint(n), "-epochs", fmt.Sprint(epochs), "-batch", "3", "-freeze", "127.0.0.1:1:1:12"}
	r := runElastic(t, []string{"-np", "4", "--min-np", "2", "--heartbeat-timeout-seconds", "2", "-H", "localhost:2,127.0.0.1:2"}, wargs, nil)
	if r.err != nil {
		t.Fatalf("job failed: %v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "127.0.0.1[1] was declared frozen by the job: killing it") {
		t.Errorf("the launcher did not say it killed the frozen worker:\n%s", r.stderr)
	}
	if got := rounds(t, r.stderr); !slices.Equal(got, []int{4, 2}) {
		t.Fatalf("rounds of sizes %v, want [4 2]\n%s", got, r.stderr)
	}
	recs := parseRecords(t, r.stdout)
	sizes := checkCoverage(t, recs, n, epochs)
	if sizes[0][0] != 4 || sizes[epochs-1][0] != 2 {
		t.Fatalf("sizes per epoch %v: want 4 at the start and 2 at the end", sizes)
	}
	t.Logf("recovery, from the freeze to the first completed step after the reset: %v", recovery(t, recs))
}
