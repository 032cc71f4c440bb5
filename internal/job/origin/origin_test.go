package origin

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func slots(hosts ...string) []rendezvous.Slot {
	var out []rendezvous.Slot
	n := map[string]int{}
	for _, h := range hosts {
		out = append(out, rendezvous.Slot{Host: h, LocalRank: n[h]})
		n[h]++
	}
	return out
}

func TestDetectTorch(t *testing.T) {
	torchrun := []string{"RANK", "3", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "GROUP_RANK", "1",
		"MASTER_ADDR", "10.0.0.1", "MASTER_PORT", "29500", "TORCHELASTIC_RUN_ID", "job7", "TORCHELASTIC_RESTART_COUNT", "2",
		"TORCHELASTIC_USE_AGENT_STORE", "True"}
	p, ok, err := Detect(env(torchrun...))
	if !ok || err != nil {
		t.Fatalf("torchrun: ok %v, %v", ok, err)
	}
	want := Placement{Engine: Torchrun, Rank: 3, Size: 4, Slots: slots("node0", "node0", "node1", "node1"),
		Master: "10.0.0.1:29500", Store: true, Job: "torch/10.0.0.1:29500/job7/2"}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("torchrun: got %+v\nwant %+v", p, want)
	}
	if p.Me() != (rendezvous.Slot{Host: "node1", LocalRank: 1}) || p.LocalSize() != 2 {
		t.Errorf("Me %v LocalSize %d", p.Me(), p.LocalSize())
	}

	// PyTorchJob and Volcano: one process per pod, no LOCAL_*, no agent.
	p, ok, err = Detect(env("RANK", "1", "WORLD_SIZE", "3", "MASTER_ADDR", "job-master-0", "MASTER_PORT", "23456"))
	if !ok || err != nil {
		t.Fatalf("pod: ok %v, %v", ok, err)
	}
	if p.Engine != EnvInit || p.Store || p.Master != "job-master-0:23456" || !reflect.DeepEqual(p.Slots, slots("node0", "node1", "node2")) {
		t.Errorf("pod: %+v", p)
	}

	// IPv6 master addresses are bracketed.
	p, _, _ = Detect(env("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "fd00::1", "MASTER_PORT", "1234"))
	if p.Master != "[fd00::1]:1234" {
		t.Errorf("IPv6 master %q", p.Master)
	}

	bad := []struct {
		name string
		env  []string
		says string
	}{
		{"no master", []string{"RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "1"}, "MASTER_ADDR"},
		{"no port", []string{"RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h"}, "MASTER_PORT is not set"},
		{"port out of range", []string{"RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "70000"}, "not a port"},
		{"rank beyond size", []string{"RANK", "2", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, "not a rank"},
		{"not a number", []string{"RANK", "x", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, `RANK="x"`},
		{"uneven nodes", []string{"RANK", "0", "WORLD_SIZE", "3", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, "same number of workers"},
		{"group rank disagrees", []string{"RANK", "1", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "2", "GROUP_RANK", "1", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, "consecutive"},
		{"local rank disagrees", []string{"RANK", "1", "WORLD_SIZE", "4", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, "not local rank 0"},
		{"local rank alone", []string{"RANK", "1", "WORLD_SIZE", "4", "LOCAL_RANK", "1", "MASTER_ADDR", "h", "MASTER_PORT", "1"}, "LOCAL_WORLD_SIZE"},
	}
	for _, b := range bad {
		_, ok, err := Detect(env(b.env...))
		if !ok || err == nil || !strings.Contains(err.Error(), b.says) {
			t.Errorf("%s: ok %v, error %v; want one saying %q", b.name, ok, err, b.says)
		}
	}
	// RANK alone is not torch's contract.
	if _, ok, err := Detect(env("RANK", "1")); ok || err != nil {
		t.Errorf("RANK alone: ok %v, %v", ok, err)
	}
}

func TestDetectSrun(t *testing.T) {
	step := func(kv ...string) []string {
		return append([]string{"SLURM_JOB_ID", "41", "SLURM_STEP_ID", "3", "SLURM_STEP_NUM_TASKS", "5",
			"SLURM_STEP_NODELIST", "n[1-2]", "SLURM_STEP_TASKS_PER_NODE", "3,2"}, kv...)
	}
	p, ok, err := Detect(env(step("SLURM_PROCID", "4", "SLURM_LOCALID", "1", "SLURM_NODEID", "1")...))
	if !ok || err != nil {
		t.Fatalf("srun: ok %v, %v", ok, err)
	}
	want := Placement{Engine: Srun, Rank: 4, Size: 5, Slots: slots("n1", "n1", "n1", "n2", "n2"),
		Master: "n1:" + strconv.Itoa(SrunPort(41, 3)), Job: "slurm/41.3"}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	p, _, err = Detect(env(step("SLURM_PROCID", "0", "SLURM_LOCALID", "0", "SLURM_NODEID", "0", "HOROVOD_GLOO_RENDEZVOUS_PORT", "31000")...))
	if err != nil || p.Master != "n1:31000" {
		t.Errorf("port override: %q, %v", p.Master, err)
	}
	// "2(x2)" and the old variable names.
	p, ok, err = Detect(env("SLURM_JOB_ID", "9", "SLURM_STEPID", "0", "SLURM_NTASKS", "4", "SLURM_PROCID", "2", "SLURM_LOCALID", "0",
		"SLURM_NODEID", "1", "SLURM_STEP_NODELIST", "a,b", "SLURM_STEP_TASKS_PER_NODE", "2(x2)"))
	if !ok || err != nil || p.Me() != (rendezvous.Slot{Host: "b", LocalRank: 0}) {
		t.Errorf("2(x2): %+v, %v, %v", p, ok, err)
	}
	// A batch script's own step is not srun's.
	if _, ok, err := Detect(env("SLURM_JOB_ID", "9", "SLURM_STEP_ID", "batch", "SLURM_PROCID", "0")); ok || err != nil {
		t.Errorf("batch step: ok %v, %v", ok, err)
	}
	// Outside any step.
	if _, ok, _ := Detect(env("SLURM_JOB_ID", "9", "SLURM_JOB_NODELIST", "a")); ok {
		t.Error("an allocation without a step was taken for srun")
	}
	bad := []struct {
		name string
		env  []string
		says string
	}{
		{"cyclic", step("SLURM_PROCID", "1", "SLURM_LOCALID", "0", "SLURM_NODEID", "1"), "--distribution=block"},
		{"no procid", step("SLURM_LOCALID", "0", "SLURM_NODEID", "0"), "SLURM_PROCID"},
		{"counts disagree", append(step("SLURM_PROCID", "0", "SLURM_LOCALID", "0", "SLURM_NODEID", "0"), "SLURM_STEP_NUM_TASKS", "6"), "places 5 tasks"},
		{"bad port", step("SLURM_PROCID", "0", "SLURM_LOCALID", "0", "SLURM_NODEID", "0", "HOROVOD_GLOO_RENDEZVOUS_PORT", "0"), "not a port"},
	}
	for _, b := range bad {
		_, ok, err := Detect(env(b.env...)) // a later value of a variable wins
		if !ok || err == nil || !strings.Contains(err.Error(), b.says) {
			t.Errorf("%s: ok %v, error %v; want one saying %q", b.name, ok, err, b.says)
		}
	}
	// torch's variables win over SLURM's: torchrun inside a step.
	both := append(step("SLURM_PROCID", "0", "SLURM_LOCALID", "0", "SLURM_NODEID", "0"),
		"RANK", "1", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "1")
	if p, _, _ := Detect(env(both...)); p.Engine != EnvInit {
		t.Errorf("torch inside srun: engine %q", p.Engine)
	}
}

func TestSrunPort(t *testing.T) {
	seen := map[int]bool{}
	for job := 1; job < 50; job++ {
		for step := 0; step < 4; step++ {
			p := SrunPort(job, step)
			if p < portBase || p >= portBase+portSpan {
				t.Fatalf("SrunPort(%d, %d) = %d, outside the range", job, step, p)
			}
			if seen[p] {
				t.Errorf("SrunPort(%d, %d) = %d collides with an earlier step", job, step, p)
			}
			seen[p] = true
		}
	}
}

func TestJobSecret(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "key")
	// Workers racing to create the key all end with the same one.
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	errs := make([]error, 8)
	for i := range got {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = JobSecret(file, "slurm/1.0") }()
	}
	wg.Wait()
	for i := range got {
		if errs[i] != nil || string(got[i]) != string(got[0]) || len(got[i]) != 32 {
			t.Fatalf("worker %d: %x, %v (worker 0: %x)", i, got[i], errs[i], got[0])
		}
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode().Perm(), err)
	}
	other, err := JobSecret(file, "slurm/2.0")
	if err != nil || string(other) == string(got[0]) {
		t.Errorf("another job's secret %x, %v: want a different one", other, err)
	}
	again, _ := JobSecret(file, "slurm/1.0")
	if string(again) != string(got[0]) {
		t.Error("the same job derived another secret from the same key")
	}
	os.Chmod(file, 0o644)
	if _, err := JobSecret(file, "slurm/1.0"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a readable key file: %v", err)
	}
	os.Chmod(file, 0o600)
	os.WriteFile(file, []byte("short\n"), 0o600)
	if _, err := JobSecret(file, "slurm/1.0"); err == nil || !strings.Contains(err.Error(), "hex key") {
		t.Errorf("a key file without a key: %v", err)
	}
	if f, err := KeyFile(env("HOME", "/home/u")); err != nil || f != "/home/u/.gohorovod/key" {
		t.Errorf("KeyFile from HOME: %q, %v", f, err)
	}
	if f, _ := KeyFile(env("HOME", "/home/u", EnvKeyFile, "/k")); f != "/k" {
		t.Errorf("KeyFile override: %q", f)
	}
	if _, err := KeyFile(env()); err == nil || !strings.Contains(err.Error(), "GOHOROVOD_SECRET") {
		t.Errorf("no HOME: %v", err)
	}
}
