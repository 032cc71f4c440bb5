package elastic

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func hosts(spec ...string) Discovered {
	out, err := ParseDiscovery(strings.Join(spec, "\n"), 0)
	if err != nil {
		panic(err)
	}
	return Discovered{Hosts: out}
}

func slot(s string) Slot {
	var sl Slot
	h, l, _ := strings.Cut(strings.TrimSuffix(s, "]"), "[")
	sl.Host = h
	fmt.Sscan(l, &sl.Local)
	return sl
}

func ready(s string) Ready              { return Ready{Slot: slot(s)} }
func ok(s string) Succeeded             { return Succeeded{Slot: slot(s)} }
func fail(s string, st int) Failed      { return Failed{Slot: slot(s), Status: st} }
func discFail(code int) DiscoveryFailed { return DiscoveryFailed{ExitCode: code} }

// summary renders a decision compactly for the tables.
func summary(d Decision) string {
	var parts []string
	if d.Round != nil {
		var r []string
		for _, i := range d.Round.Slots {
			r = append(r, i.Slot.String())
		}
		parts = append(parts, fmt.Sprintf("round %d [%s]", d.Round.ID, strings.Join(r, " ")))
	}
	list := func(name string, ss []Slot) {
		if len(ss) > 0 {
			var r []string
			for _, s := range ss {
				r = append(r, s.String())
			}
			parts = append(parts, name+" ["+strings.Join(r, " ")+"]")
		}
	}
	list("start", d.Start)
	list("stop", d.Stop)
	if d.Notify != NoUpdate {
		parts = append(parts, "notify "+d.Notify.String())
	}
	if d.Done {
		if d.Err != nil {
			parts = append(parts, "fail: "+d.Err.Error())
		} else {
			parts = append(parts, "done")
		}
	}
	return strings.Join(parts, "; ")
}

type step struct {
	t    int // seconds after t0
	ev   Event
	want string
}

func TestDriver(t *testing.T) {
	cooldown := Config{NP: 4, MinNP: 2, CooldownMin: 10 * time.Second, CooldownMax: 100 * time.Second, Rand: func() float64 { return 0.5 }}
	tests := []struct {
		name  string
		cfg   Config
		steps []step
		// resets is the reset count at the end.
		resets int
	}{
		{"start waits for -np slots", Config{NP: 4}, []step{
			{0, hosts(), ""},
			{1, hosts("a:2"), ""},
			{2, Tick{}, ""},
			{3, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{4, Tick{}, ""},
			{5, hosts("a:2", "b:2"), ""},
		}, 0},
		{"hosts added 2 -> 4, then removed back to 2", Config{NP: 2, MaxNP: 4}, []step{
			{0, hosts("a:2"), "round 1 [a[0] a[1]]; start [a[0] a[1]]"},
			{1, hosts("a:2", "b:2"), "notify added"},
			{2, hosts("a:2", "b:2"), ""}, // told once per round
			{3, ready("a[1]"), ""},
			{3, ready("a[0]"), "round 2 [a[0] a[1] b[0] b[1]]; start [b[0] b[1]]"},
			{4, hosts("a:2"), "notify removed"},
			{5, ready("b[0]"), ""},
			{5, ready("a[0]"), ""},
			{5, ready("b[1]"), ""},
			{5, ready("a[1]"), "round 3 [a[0] a[1]]; stop [b[0] b[1]]"},
			{6, ok("b[0]"), ""}, // a removed worker's exit is ignored
			{7, ok("a[0]"), ""},
			{7, ok("a[1]"), "done"},
			{8, Tick{}, "done"},
		}, 2},
		{"new hosts are appended: old workers keep the low ranks", Config{NP: 2, MaxNP: 8}, []step{
			{0, hosts("b:1", "a:1"), "round 1 [b[0] a[0]]; start [b[0] a[0]]"},
			{1, hosts("c:1", "a:1", "b:1"), "notify added"},
			{2, ready("a[0]"), ""},
			{2, ready("b[0]"), "round 2 [b[0] a[0] c[0]]; start [c[0]]"},
		}, 1},
		{"a failure blacklists its whole host for good", Config{NP: 4, MinNP: 2}, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{10, fail("b[1]", 137), ""},
			{10, hosts("a:2", "b:2"), ""}, // the reset is under way: no notice
			{11, ready("a[0]"), ""},
			{11, ready("b[0]"), ""},
			{11, ready("a[1]"), "round 2 [a[0] a[1]]; stop [b[0]]"},
			{12, hosts("a:2", "b:2"), ""},
			{100000, Tick{}, ""},
		}, 1},
		{"a worker that fails after it reported Ready counts as failed", Config{NP: 2, MinNP: 1}, []step{
			{0, hosts("a:1", "b:1"), "round 1 [a[0] b[0]]; start [a[0] b[0]]"},
			{1, ready("b[0]"), ""},
			{1, fail("b[0]", 1), ""},
			{2, ready("a[0]"), "round 2 [a[0]]"},
		}, 1},
		{"cooldown re-admits the host, appended after the others", cooldown, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{5, ready("b[0]"), ""},
			{5, ready("b[1]"), ""},
			{5, fail("a[0]", 1), ""},
			// a is blacklisted for 10*2^0 + 0.5*10 = 15 s, until t=20.
			{5, ready("a[1]"), "round 2 [b[0] b[1]]; stop [a[1]]"},
			{10, Tick{}, ""},
			{19, hosts("a:2", "b:2"), ""},
			{20, Tick{}, "notify added"},
			{21, ready("b[0]"), ""},
			{21, ready("b[1]"), "round 3 [b[0] b[1] a[0] a[1]]; start [a[0] a[1]]"},
			// Second time: 10*2^1 + 5 = 25 s, until t=55.
			{30, fail("a[1]", 1), ""},
			{30, ready("a[0]"), ""},
			{30, ready("b[0]"), ""},
			{30, ready("b[1]"), "round 4 [b[0] b[1]]; stop [a[0]]"},
			{54, Tick{}, ""},
			{55, Tick{}, "notify added"},
		}, 3},
		{"below --min-np the reset waits, then times out", Config{NP: 4, MinNP: 3, ElasticTimeout: time.Minute}, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{5, hosts("a:2"), "notify removed"},
			{10, ready("a[0]"), ""},
			{10, ready("a[1]"), ""},
			{10, ready("b[0]"), ""},
			{10, ready("b[1]"), ""},
			{69, Tick{}, ""},
			{70, Tick{}, "stop [a[0] a[1] b[0] b[1]]; fail: elastic: timed out after 1m0s waiting for 3 slots (--min-np 3), 2 available; please check that you have enough resources to run at least 3 Horovod processes"},
			{71, Tick{}, "fail: elastic: timed out after 1m0s waiting for 3 slots (--min-np 3), 2 available; please check that you have enough resources to run at least 3 Horovod processes"},
		}, 1},
		{"below --min-np the reset waits, and goes on when a host comes", Config{NP: 4, MinNP: 3, ElasticTimeout: time.Minute}, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{5, hosts("a:2"), "notify removed"},
			{10, ready("a[0]"), ""},
			{10, ready("a[1]"), ""},
			{10, ready("b[0]"), ""},
			{10, ready("b[1]"), ""},
			{40, hosts("a:2", "c:1"), "round 2 [a[0] a[1] c[0]]; start [c[0]]; stop [b[0] b[1]]"},
		}, 1},
		{"the start times out below -np", Config{NP: 4, ElasticTimeout: 30 * time.Second}, []step{
			{0, hosts("a:3"), ""},
			{30, Tick{}, "fail: elastic: timed out after 30s waiting for 4 slots (-np 4), 3 available; please check that you have enough resources to run at least 4 Horovod processes"},
		}, 0},
		{"a discovery script that never answers is named at the timeout", Config{NP: 2, ElasticTimeout: 10 * time.Second, DiscoveryScript: "./discover.sh"}, []step{
			{10, Tick{}, "fail: elastic: timed out after 10s waiting for 2 slots (-np 2): the host discovery script ./discover.sh timed out: " +
				"it had not printed its hosts when the elastic timeout (--elastic-timeout) passed; check that it ends, or give the job a longer --elastic-timeout"},
		}, 0},
		{"reset limit 1 fails on the second reset", Config{NP: 2, ResetLimit: 1}, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{1, hosts("a:2"), "notify removed"},
			{2, ready("a[0]"), ""}, {2, ready("a[1]"), ""}, {2, ready("b[0]"), ""},
			{2, ready("b[1]"), "round 2 [a[0] a[1]]; stop [b[0] b[1]]"},
			{3, hosts("a:2", "b:2"), "notify added"},
			{4, ready("a[0]"), ""},
			{4, ready("a[1]"), "stop [a[0] a[1]]; fail: Horovod was shutdown because number of resets during elastic job exceeded limit: 1"},
		}, 1},
		{"reset limit 2 allows two resets", Config{NP: 2, ResetLimit: 2}, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0] b[1]]; start [a[0] a[1] b[0] b[1]]"},
			{1, hosts("a:2"), "notify removed"},
			{2, ready("a[0]"), ""}, {2, ready("a[1]"), ""}, {2, ready("b[0]"), ""},
			{2, ready("b[1]"), "round 2 [a[0] a[1]]; stop [b[0] b[1]]"},
			{3, hosts("a:2", "b:2"), "notify added"},
			{4, ready("a[0]"), ""},
			{4, ready("a[1]"), "round 3 [a[0] a[1] b[0] b[1]]; start [b[0] b[1]]"},
			{5, ok("a[0]"), ""}, {5, ok("a[1]"), ""}, {5, ok("b[0]"), ""},
			{5, ok("b[1]"), "done"},
		}, 2},
		{"any success ends the job and stops the others", Config{NP: 2}, []step{
			{0, hosts("a:1", "b:1", "c:1"), "round 1 [a[0] b[0] c[0]]; start [a[0] b[0] c[0]]"},
			{1, ok("a[0]"), ""},
			{2, fail("c[0]", 1), ""},
			{3, ready("b[0]"), "stop [b[0]]; done"},
		}, 0},
		{"every worker failing ends the job", Config{NP: 2, MinNP: 1}, []step{
			{0, hosts("a:1", "b:1"), "round 1 [a[0] b[0]]; start [a[0] b[0]]"},
			{1, fail("a[0]", 1), ""},
			{2, fail("b[0]", 137), "fail: elastic: every worker failed (a[0] exit status 1, b[0] exit status 137); Horovod detected that one or more processes exited with non-zero status"},
		}, 0},
		{"every host blacklisted ends the job", Config{NP: 3, MinNP: 1}, []step{
			{0, hosts("a:2", "b:1"), "round 1 [a[0] a[1] b[0]]; start [a[0] a[1] b[0]]"},
			{1, fail("a[0]", 1), ""},
			{1, fail("b[0]", 1), ""},
			{2, ready("a[1]"), "stop [a[1]]; fail: elastic: every host of the job is blacklisted after its workers failed (a, b); no host is left to run on"},
		}, 0},
		{"--max-np caps the assignment host by host", Config{NP: 2, MaxNP: 3}, []step{
			{0, hosts("a:2", "b:2"), "round 1 [a[0] a[1] b[0]]; start [a[0] a[1] b[0]]"},
			{1, hosts("a:2", "b:2", "c:4"), ""}, // the assignment would not change
			{2, hosts("a:2", "c:4"), "notify mixed"},
			{3, ready("a[0]"), ""}, {3, ready("a[1]"), ""},
			{3, ready("b[0]"), "round 2 [a[0] a[1] c[0]]; start [c[0]]; stop [b[0]]"},
		}, 1},
		{"no host of the previous round left", Config{NP: 2}, []step{
			{0, hosts("a:2"), "round 1 [a[0] a[1]]; start [a[0] a[1]]"},
			{1, hosts("b:2"), "notify mixed"},
			{2, ready("a[0]"), ""},
			{2, ready("a[1]"), "stop [a[0] a[1]]; fail: No hosts from previous set remaining, unable to broadcast state."},
		}, 1},
		{"the first discovery failure is fatal", Config{NP: 2, DiscoveryScript: "./discover.sh"}, []step{
			{0, discFail(3), "fail: Failed to execute discovery script: ./discover.sh. Exit code: 3"},
		}, 0},
		{"later discovery failures are tolerated until the elastic timeout", Config{NP: 1, ElasticTimeout: 10 * time.Second, DiscoveryScript: "d"}, []step{
			{0, hosts("a:1"), "round 1 [a[0]]; start [a[0]]"},
			{1, discFail(1), ""},
			{5, hosts("a:1"), ""},
			{6, discFail(1), ""},
			{15, discFail(2), ""},
			{16, discFail(2), "stop [a[0]]; fail: elastic: host discovery kept failing for 10s: Failed to execute discovery script: d. Exit code: 2"},
		}, 0},
		{"reports of unknown workers are ignored", Config{NP: 1}, []step{
			{0, ready("x[0]"), ""},
			{0, hosts("a:1"), "round 1 [a[0]]; start [a[0]]"},
			{1, fail("x[0]", 1), ""},
			{2, ok("a[0]"), "done"},
		}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := New(tc.cfg, t0)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				if got := summary(d.Step(at(s.t), s.ev)); got != s.want {
					t.Fatalf("step %d (t=%ds, %T %v):\n got %q\nwant %q", i, s.t, s.ev, s.ev, got, s.want)
				}
			}
			if d.Resets() != tc.resets {
				t.Errorf("resets = %d, want %d", d.Resets(), tc.resets)
			}
		})
	}
}

func TestSlotInfo(t *testing.T) {
	d, err := New(Config{NP: 5}, t0)
	if err != nil {
		t.Fatal(err)
	}
	d.Step(t0, hosts("a:2", "b:1", "c:2"))
	want := []SlotInfo{
		{Slot: Slot{"a", 0}, Rank: 0, Size: 5, LocalSize: 2, CrossRank: 0, CrossSize: 3},
		{Slot: Slot{"a", 1}, Rank: 1, Size: 5, LocalSize: 2, CrossRank: 0, CrossSize: 2},
		{Slot: Slot{"b", 0}, Rank: 2, Size: 5, LocalSize: 1, CrossRank: 1, CrossSize: 3},
		{Slot: Slot{"c", 0}, Rank: 3, Size: 5, LocalSize: 2, CrossRank: 2, CrossSize: 3},
		{Slot: Slot{"c", 1}, Rank: 4, Size: 5, LocalSize: 2, CrossRank: 1, CrossSize: 2},
	}
	got := d.Assignment()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("assignment\n got %v\nwant %v", got, want)
	}
	if d.Round() != 1 {
		t.Errorf("round = %d, want 1", d.Round())
	}
}

func TestBlacklistedAndErrors(t *testing.T) {
	d, _ := New(Config{NP: 2, MinNP: 1, CooldownMin: time.Second, CooldownMax: time.Second, Rand: func() float64 { return 0 }}, t0)
	d.Step(at(0), hosts("a:1", "b:1"))
	d.Step(at(1), fail("a[0]", 1))
	d.Step(at(1), ready("b[0]"))
	if !d.Blacklisted("a", at(1)) || d.Blacklisted("a", at(2)) || d.Blacklisted("b", at(1)) {
		t.Errorf("blacklist: a@1 %v a@2 %v b@1 %v, want true false false",
			d.Blacklisted("a", at(1)), d.Blacklisted("a", at(2)), d.Blacklisted("b", at(1)))
	}

	d, _ = New(Config{NP: 1, ResetLimit: 1}, t0)
	d.Step(at(0), hosts("a:1"))
	d.Step(at(1), hosts("a:1", "b:1"))
	d.Step(at(1), ready("a[0]"))
	d.Step(at(2), hosts("a:1"))
	d.Step(at(3), ready("b[0]"))
	dec := d.Step(at(3), ready("a[0]"))
	var rl *ResetLimitError
	if !errors.As(dec.Err, &rl) || rl.Limit != 1 {
		t.Errorf("err = %v, want a *ResetLimitError with limit 1", dec.Err)
	}
	if done, err := d.Done(); !done || err != dec.Err {
		t.Errorf("Done() = %v, %v", done, err)
	}

	d, _ = New(Config{NP: 1, DiscoveryScript: "s"}, t0)
	inner := errors.New("exec: not found")
	dec = d.Step(t0, DiscoveryFailed{ExitCode: 127, Err: inner})
	var de *DiscoveryError
	if !errors.As(dec.Err, &de) || !errors.Is(dec.Err, inner) || de.ExitCode != 127 {
		t.Errorf("err = %v, want a *DiscoveryError wrapping %v", dec.Err, inner)
	}
}

func TestCooldown(t *testing.T) {
	const s = time.Second
	tests := []struct {
		min, max time.Duration
		count    int
		u        float64
		want     time.Duration
	}{
		{10 * s, 100 * s, 0, 0, 10 * s},
		{10 * s, 100 * s, 0, 0.5, 15 * s},
		{10 * s, 100 * s, 1, 0.5, 25 * s},
		{10 * s, 100 * s, 3, 0, 80 * s},
		{10 * s, 100 * s, 3, 0.99, 89900 * time.Millisecond},
		{10 * s, 100 * s, 4, 0, 100 * s},
		{10 * s, 100 * s, 200, 0.5, 100 * s},
		{10 * s, 10 * s, 0, 0.9, 10 * s},
		{10 * s, 100 * s, -1, 0, 10 * s},
	}
	for _, tc := range tests {
		if got := Cooldown(tc.min, tc.max, tc.count, tc.u); got != tc.want {
			t.Errorf("Cooldown(%s, %s, %d, %v) = %s, want %s", tc.min, tc.max, tc.count, tc.u, got, tc.want)
		}
	}
}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		cfg  Config
		want string // error text, or "" for none
	}{
		{Config{NP: 2}, ""},
		{Config{NP: 2, MinNP: 1, MaxNP: 4, CooldownMin: time.Second, CooldownMax: time.Minute}, ""},
		{Config{NP: 0}, "elastic: -np must be at least 1, got 0"},
		{Config{NP: 2, MinNP: 3}, "elastic: --min-np 3 must be between 1 and -np 2"},
		{Config{NP: 2, MinNP: -1}, "elastic: --min-np -1 must be between 1 and -np 2"},
		{Config{NP: 4, MaxNP: 2}, "elastic: --max-np 2 must be at least -np 4"},
		{Config{NP: 1, ElasticTimeout: -time.Second}, "elastic: --elastic-timeout must not be negative, got -1s"},
		{Config{NP: 1, CooldownMin: time.Minute, CooldownMax: time.Second}, "elastic: --blacklist-cooldown-range 1m0s 1s: want 0 < MIN <= MAX"},
		{Config{NP: 1, CooldownMax: time.Second}, "elastic: --blacklist-cooldown-range 0s 1s: want 0 < MIN <= MAX"},
	}
	for _, tc := range tests {
		_, err := New(tc.cfg, t0)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("New(%+v) error %q, want %q", tc.cfg, got, tc.want)
		}
	}
}

func TestParseDiscovery(t *testing.T) {
	tests := []struct {
		out  string
		per  int
		want string // hosts, or the error
	}{
		{"", 0, "[]"},
		{"\n  \n", 0, "[]"},
		{"a:2\nb:4\n", 0, "[a:2 b:4]"},
		{"  a:2  \r\nb\n", 3, "[a:2 b:3]"},
		{"10.0.0.1:1\nnode-1.example.com\nw_2:8", 2, "[10.0.0.1:1 node-1.example.com:2 w_2:8]"},
		{"a:2\nb\n", 0, `elastic: discovery output line 2 "b": no slot count, and --slots-per-host is not set`},
		{"a:0", 0, `elastic: discovery output line 1 "a:0": the slot count must be a positive number`},
		{"a:x", 0, `elastic: discovery output line 1 "a:x": the slot count must be a positive number`},
		{"a:", 0, `elastic: discovery output line 1 "a:": the slot count must be a positive number`},
		{"a:2:3", 0, `elastic: discovery output line 1 "a:2:3": the slot count must be a positive number`},
		{"a b:2", 0, `elastic: discovery output line 1 "a b:2": want host or host:slots (host made of letters, digits, '.', '-' and '_')`},
		{":2", 0, `elastic: discovery output line 1 ":2": want host or host:slots (host made of letters, digits, '.', '-' and '_')`},
		{"a:1\n\nb:1\na:2", 0, `elastic: discovery output line 4 "a:2": host a is already listed on line 1`},
	}
	for _, tc := range tests {
		hs, err := ParseDiscovery(tc.out, tc.per)
		got := fmt.Sprint(hs)
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("ParseDiscovery(%q, %d) = %s, want %s", tc.out, tc.per, got, tc.want)
		}
	}
}
