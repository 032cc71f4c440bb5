package launch

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSSHCommand(t *testing.T) {
	got := SSHCheck{Port: 1022, Identity: "/k"}.Command("h1")
	want := []string{"ssh", "-o", "PasswordAuthentication=no", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes",
		"-o", "ConnectTimeout=10", "-p", "1022", "-i", "/k", "h1", "true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Command = %q\nwant %q", got, want)
	}
}

func TestSSHCheck(t *testing.T) {
	hosts := []string{"good", "flaky", "bad", "worse"}
	var mu sync.Mutex
	calls := map[string]int{}
	// Every host's first attempt waits until all hosts have made theirs:
	// a sequential check would never get past the first host.
	var first sync.WaitGroup
	first.Add(len(hosts))
	allStarted := make(chan struct{})
	go func() { first.Wait(); close(allStarted) }()
	run := func(ctx context.Context, argv []string) ([]byte, error) {
		host := argv[len(argv)-2]
		mu.Lock()
		calls[host]++
		n := calls[host]
		mu.Unlock()
		if n == 1 {
			first.Done()
			select {
			case <-allStarted:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		switch {
		case host == "good", host == "flaky" && n == 3:
			return nil, nil
		}
		return []byte("Permission denied (publickey)."), errors.New("exit status 255")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := SSHCheck{Attempts: 4, Retry: time.Nanosecond, Run: run}.Check(ctx, hosts)
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("Check = %v, want an *UnreachableError", err)
	}
	if !reflect.DeepEqual(ue.Hosts, []string{"bad", "worse"}) {
		t.Errorf("unreachable hosts %q, want [bad worse]", ue.Hosts)
	}
	msg := err.Error()
	for _, want := range []string{"could not connect to 2 host(s) via ssh: bad, worse", "Permission denied", "--ssh-port"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if calls["bad"] != 4 || calls["good"] != 1 || calls["flaky"] != 3 {
		t.Errorf("attempts %v, want bad 4, good 1, flaky 3", calls)
	}
	if err := (SSHCheck{Run: run}).Check(ctx, nil); err != nil {
		t.Errorf("Check(no hosts) = %v", err)
	}
}

func TestSSHCheckDeadline(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	run := func(ctx context.Context, argv []string) ([]byte, error) { calls++; return nil, ctx.Err() }
	err := SSHCheck{Attempts: 5, Run: run}.Check(ctx, []string{"h"})
	if err == nil || !strings.Contains(err.Error(), "timed out") || calls != 1 {
		t.Errorf("Check after deadline = %v after %d calls, want a time-out after 1", err, calls)
	}
}

func TestLocality(t *testing.T) {
	l := &Locality{
		Hostname:   "vm.example.com",
		LocalAddrs: []net.IP{net.ParseIP("10.0.0.5")},
		Resolve: func(h string) []net.IP {
			return map[string][]net.IP{"me-alias": {net.ParseIP("10.0.0.5")}, "other": {net.ParseIP("10.0.0.6")},
				"lo-alias": {net.ParseIP("127.0.1.1")}}[h]
		},
	}
	tests := map[string]bool{
		"localhost": true, "vm": true, "vm.example.com": true, "127.0.0.1": true, "::1": true,
		"10.0.0.5": true, "me-alias": true, "lo-alias": true,
		"other": false, "10.0.0.6": false, "unknown": false,
	}
	for h, want := range tests {
		if got := l.IsLocal(h); got != want {
			t.Errorf("IsLocal(%q) = %v, want %v", h, got, want)
		}
	}
}
