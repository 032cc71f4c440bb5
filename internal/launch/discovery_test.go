package launch

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
)

// writeScript writes a discovery script into dir with mode perm.
func writeScript(t *testing.T, dir, name, body string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), perm); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDiscovery(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name         string
		script       string // body; "" means no file
		perm         os.FileMode
		slotsPerHost int
		timeout      time.Duration
		want         []elastic.Host // when the run succeeds
		wantCode     int            // when it fails
		wantErr      string
		maxTook      time.Duration // 0: 5s
	}{
		{name: "host slots", script: "#!/bin/sh\necho h1:2\necho\necho 'h2:4 '\n",
			want: []elastic.Host{{Name: "h1", Slots: 2}, {Name: "h2", Slots: 4}}},
		{name: "bare hosts", script: "#!/bin/sh\nprintf 'h1\\nh2:1\\nh3'\n", slotsPerHost: 3,
			want: []elastic.Host{{Name: "h1", Slots: 3}, {Name: "h2", Slots: 1}, {Name: "h3", Slots: 3}}},
		{name: "empty output", script: "#!/bin/sh\nexit 0\n", want: []elastic.Host{}},
		{name: "exit 3", script: "#!/bin/sh\necho h1:2\necho first >&2\necho 'cloud API down' >&2\necho >&2\nexit 3\n",
			wantCode: 3, wantErr: "cloud API down"},
		{name: "exit 5 silently", script: "#!/bin/sh\nexit 5\n", wantCode: 5},
		{name: "killed by a signal", script: "#!/bin/sh\nkill -9 $$\n", wantCode: 137, wantErr: "killed by signal 9"},
		{name: "missing", wantCode: 127, wantErr: "no such file"},
		{name: "not executable", script: "#!/bin/sh\necho h1:1\n", perm: 0o644, wantCode: 126, wantErr: "not executable"},
		{name: "no interpreter", script: "#!/nonexistent/sh\necho h1:1\n", wantCode: 127, wantErr: "interpreter"},
		{name: "malformed", script: "#!/bin/sh\necho 'h1:two'\n", wantCode: 0, wantErr: `line 1 "h1:two": the slot count must be a positive number`},
		{name: "bare host without slots per host", script: "#!/bin/sh\necho h1\n", wantCode: 0, wantErr: "--slots-per-host is not set"},
		{name: "slow", script: "#!/bin/sh\necho h1:1\nexec sleep 10\n", timeout: 200 * time.Millisecond,
			wantCode: -1, wantErr: "timed out after 200ms"},
		// The whole process group is killed: the run does not wait for
		// discoveryWaitDelay (1s) on the child that holds its output.
		{name: "slow child", script: "#!/bin/sh\nsleep 10 &\nwait\n", timeout: 200 * time.Millisecond,
			wantCode: -1, wantErr: "timed out after 200ms", maxTook: 900 * time.Millisecond},
		{name: "leaves a child holding stdout", script: "#!/bin/sh\necho h1:1\nsleep 3 &\n",
			want: []elastic.Host{{Name: "h1", Slots: 1}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "missing")
			if tt.script != "" {
				perm := tt.perm
				if perm == 0 {
					perm = 0o755
				}
				// A name with a space: the script is not run through a shell.
				path = writeScript(t, dir, "discover "+string(rune('a'+i))+".sh", tt.script, perm)
			}
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			start := time.Now()
			ev := runDiscovery(context.Background(), path, tt.slotsPerHost, timeout)
			maxTook := tt.maxTook
			if maxTook == 0 || runtime.GOOS != "linux" { // process groups: proc_linux.go
				maxTook = 5 * time.Second
			}
			if took := time.Since(start); took > maxTook {
				t.Errorf("the run took %v, want at most %v", took, maxTook)
			}
			switch e := ev.(type) {
			case elastic.Discovered:
				if tt.want == nil || !reflect.DeepEqual(e.Hosts, tt.want) {
					t.Errorf("got %+v, want hosts %v or a failure (exit code %d, %q)", e, tt.want, tt.wantCode, tt.wantErr)
				}
			case elastic.DiscoveryFailed:
				if tt.want != nil || e.ExitCode != tt.wantCode {
					t.Fatalf("got %+v, want hosts %v or a failure (exit code %d, %q)", e, tt.want, tt.wantCode, tt.wantErr)
				}
				switch {
				case tt.wantErr == "" && e.Err != nil:
					t.Errorf("Err = %v, want nil", e.Err)
				case tt.wantErr != "" && (e.Err == nil || !strings.Contains(e.Err.Error(), tt.wantErr)):
					t.Errorf("Err = %v, want one containing %q", e.Err, tt.wantErr)
				}
			default:
				t.Fatalf("got %T %+v", ev, ev)
			}
		})
	}
}

// TestDiscoveryErrorText checks a failure as the driver reports it.
func TestDiscoveryErrorText(t *testing.T) {
	path := writeScript(t, t.TempDir(), "d.sh", "#!/bin/sh\necho 'no quota' >&2\nexit 3\n", 0o755)
	e, ok := RunDiscovery(context.Background(), path, 0).(elastic.DiscoveryFailed)
	if !ok {
		t.Fatalf("RunDiscovery = %+v", e)
	}
	got := (&elastic.DiscoveryError{Script: path, ExitCode: e.ExitCode, Err: e.Err}).Error()
	if want := "Failed to execute discovery script: " + path + ". Exit code: 3: no quota"; got != want {
		t.Errorf("error text\n got %q\nwant %q", got, want)
	}
}

func TestDiscoveryDirectory(t *testing.T) {
	ev := RunDiscovery(context.Background(), t.TempDir(), 0)
	if e, ok := ev.(elastic.DiscoveryFailed); !ok || e.ExitCode != 126 || !strings.Contains(e.Err.Error(), "is a directory") {
		t.Errorf("a directory: %+v", ev)
	}
}

func TestDiscoveryOnPath(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, dir, "find-hosts", "#!/bin/sh\necho h1:2\n", 0o755)
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if ev := RunDiscovery(context.Background(), "find-hosts", 0); !reflect.DeepEqual(ev, elastic.Discovered{Hosts: []elastic.Host{{Name: "h1", Slots: 2}}}) {
		t.Errorf("a script on PATH: %+v", ev)
	}
	ev := RunDiscovery(context.Background(), "no-such-discovery-script", 0)
	if e, ok := ev.(elastic.DiscoveryFailed); !ok || e.ExitCode != 127 || !strings.Contains(e.Err.Error(), "not found on PATH") {
		t.Errorf("a name not on PATH: %+v", ev)
	}
}

func TestDiscoveryCancel(t *testing.T) {
	path := writeScript(t, t.TempDir(), "d.sh", "#!/bin/sh\nexec sleep 10\n", 0o755)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	ev := RunDiscovery(ctx, path, 0)
	if e, ok := ev.(elastic.DiscoveryFailed); !ok || e.ExitCode != -1 || !strings.Contains(e.Err.Error(), "context canceled") {
		t.Errorf("RunDiscovery after cancel = %+v", ev)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the run took %v after its context ended", took)
	}
}
