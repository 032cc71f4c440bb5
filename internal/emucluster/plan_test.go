package emucluster

import (
	"strings"
	"testing"
)

func TestLossMatchesTakeTheShareEvenly(t *testing.T) {
	for _, p := range []float64{0, 1.0 / 65536, 0.01, 0.02, 1.0 / 64, 0.1, 0.25, 0.333, 0.5} {
		ms := LossMatches(p)
		want := int(p*65536 + 0.5)
		taken := 0
		// Longest run of ids taken in a row, and the most taken in any
		// window of 256 consecutive ids: drops must be spread, not bunched.
		run, longest := 0, 0
		hit := make([]bool, 65536)
		for id := 0; id < 65536; id++ {
			n := 0
			for _, m := range ms {
				if uint16(id)&m.Mask == m.Value {
					n++
				}
			}
			if n > 1 {
				t.Fatalf("p=%v: id %d matches %d keys; they must be disjoint", p, id, n)
			}
			hit[id] = n == 1
			if hit[id] {
				taken++
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
		if taken != want {
			t.Errorf("p=%v: %d ids taken, want %d", p, taken, want)
		}
		if hit[0] {
			t.Errorf("p=%v: id 0 is taken; every SYN-ACK would be lost", p)
		}
		if p <= 0.25 && longest > 1 {
			t.Errorf("p=%v: %d consecutive ids taken; drops should be spread", p, longest)
		}
		// Any 256 consecutive ids hold about 256p drops.
		for start := 0; start < 65536; start += 97 {
			w := 0
			for id := start; id < start+256; id++ {
				if hit[id%65536] {
					w++
				}
			}
			if d := float64(w) - 256*p; d > 2 || d < -2 {
				t.Fatalf("p=%v: ids %d..%d hold %d drops, want about %.1f", p, start, start+255, w, 256*p)
			}
		}
	}
}

func TestLossMatchesRefusesOutOfRange(t *testing.T) {
	for _, p := range []float64{-0.1, 0.6, 1} {
		if ms := LossMatches(p); ms != nil {
			t.Errorf("p=%v: %v, want none", p, ms)
		}
	}
}

func TestPlanWiresEveryNodeToTheSwitch(t *testing.T) {
	cmds, nodes, err := Plan(Options{Nodes: 3, Rate: 1e9, Loss: 0.02, Name: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 3 || nodes[2].NS != "t1-2" || nodes[2].Addr != "10.88.0.3" || nodes[0].Host != "t1-0" {
		t.Fatalf("nodes %+v", nodes)
	}
	text := make([]string, len(cmds))
	for i, c := range cmds {
		text[i] = strings.Join(c, " ")
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{
		"ip netns add t1-sw",
		"ip -n t1-sw link add name br0 type bridge",
		"ip -n t1-sw link add name p2 type veth peer name eth0 netns t1-2",
		"ip -n t1-sw link set p2 master br0",
		"ip -n t1-2 addr add 10.88.0.3/24 dev eth0",
		// Both ends of each link shaped, and both lose packets.
		"tc -n t1-2 class add dev eth0 parent 1: classid 1:10 htb rate 1000000000bit ceil 1000000000bit",
		"tc -n t1-sw class add dev p2 parent 1: classid 1:10 htb rate 1000000000bit",
		"tc -n t1-sw qdisc add dev p2 parent 1:20 handle 20: blackhole",
		"ip -n t1-2 link set dev eth0 gso_max_segs 1",
		"tc -n t1-sw filter add dev p1 parent 1: protocol ip prio 2 u32 match u16",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("plan lacks %q", want)
		}
	}
	// A namespace is made before anything is put in it.
	made := map[string]bool{}
	for _, c := range cmds {
		if len(c) >= 4 && c[1] == "netns" && c[2] == "add" {
			made[c[3]] = true
		}
		if len(c) >= 3 && (c[1] == "-n") && !made[c[2]] {
			t.Errorf("%q before its namespace is made", strings.Join(c, " "))
		}
	}
}

func TestPlanWithoutLossKeepsOffload(t *testing.T) {
	cmds, _, err := Plan(Options{Nodes: 2, Name: "t2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		s := strings.Join(c, " ")
		if strings.Contains(s, "gso_max_segs") || strings.Contains(s, "filter") {
			t.Errorf("no loss, but %q", s)
		}
		if strings.Contains(s, "classid 1:10") && !strings.Contains(s, "rate 400000000000bit") {
			t.Errorf("unshaped link, but %q", s)
		}
	}
}

func TestOptionsRefuseBadInput(t *testing.T) {
	for _, o := range []Options{
		{Nodes: 0, Name: "x"},
		{Nodes: MaxNodes + 1, Name: "x"},
		{Nodes: 2, Rate: -1, Name: "x"},
		{Nodes: 2, Rate: 1000, Name: "x"},
		{Nodes: 2, Loss: 0.7, Name: "x"},
		{Nodes: 2, Name: "a name"},
		{Nodes: 2, Name: "muchtoolongname"},
		{Nodes: 2},
	} {
		if _, _, err := Plan(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestParseRate(t *testing.T) {
	for in, want := range map[string]int64{"1gbit": 1e9, "2.5gbit": 2.5e9, "100mbit": 1e8, "10Gbit": 1e10, "0": 0, "500kbit": 5e5, "12345": 12345} {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
		if want != 0 {
			if back, _ := ParseRate(FormatRate(got)); back != got {
				t.Errorf("%d: FormatRate %q reads back as %d", got, FormatRate(got), back)
			}
		}
	}
	for _, in := range []string{"", "fast", "-1gbit", "1tbit"} {
		if _, err := ParseRate(in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}
