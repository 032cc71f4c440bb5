package launch

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseHosts(t *testing.T) {
	tests := []struct {
		in      string
		want    []Host
		wantErr string
	}{
		{"localhost:4", []Host{{"localhost", 4}}, ""},
		{"worker-0:2,worker-1.example.com:3", []Host{{"worker-0", 2}, {"worker-1.example.com", 3}}, ""},
		{" h1:1 , h2:2 ", []Host{{"h1", 1}, {"h2", 2}}, ""},
		{"h1", nil, `invalid -H entry "h1": each entry must be host:slots`},
		{"h1:", nil, "invalid -H entry"},
		{"h1:x", nil, "invalid -H entry"},
		{"h1:2,,h2:2", nil, `invalid -H entry ""`},
		{"h 1:2", nil, "invalid -H entry"},
		{"h1:0", nil, "slot count must be a positive number"},
		{"h1:2,h1:2", nil, "host h1 is listed twice"},
	}
	for _, tt := range tests {
		got, err := ParseHosts(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !IsUsage(err) {
				t.Errorf("ParseHosts(%q) error = %v, want a usage error containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseHosts(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
}

func TestParseHostfile(t *testing.T) {
	tests := []struct {
		name, in string
		want     []Host
		wantErr  string
	}{
		{"slots", "h1 slots=4\nh2 slots=2\n", []Host{{"h1", 4}, {"h2", 2}}, ""},
		{"comments and blanks", "# cluster\n\nh1 slots=4   # big\n  h2\n", []Host{{"h1", 4}, {"h2", 1}}, ""},
		{"max_slots ignored", "h1 slots=2 max_slots=8\n", []Host{{"h1", 2}}, ""},
		{"repeated host adds up", "h1 slots=2\nh1 slots=3\n", []Host{{"h1", 5}}, ""},
		{"bad slots", "h1 slots=two\n", nil, "hosts.txt:1: \"slots=two\": slots must be a positive number"},
		{"zero slots", "h1\nh2 slots=0\n", nil, "hosts.txt:2:"},
		{"unknown word", "h1 cpus=4\n", nil, "unexpected \"cpus=4\""},
		{"bad name", "h/1 slots=1\n", nil, "not a host name"},
		{"empty", "# nothing\n", nil, "lists no hosts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseHostfile(strings.NewReader(tt.in), "hosts.txt")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !IsUsage(err) {
					t.Errorf("error = %v, want a usage error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseHostfile = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name  string
		hosts []Host
		np    int
		want  []Slot
	}{
		{"horovod heterogeneous example", []Host{{"w0", 1}, {"w1", 2}}, 3, []Slot{
			{Host: "w0", Rank: 0, LocalRank: 0, LocalSize: 1, CrossRank: 0, CrossSize: 2, Size: 3},
			{Host: "w1", Rank: 1, LocalRank: 0, LocalSize: 2, CrossRank: 1, CrossSize: 2, Size: 3},
			{Host: "w1", Rank: 2, LocalRank: 1, LocalSize: 2, CrossRank: 0, CrossSize: 1, Size: 3},
		}},
		{"fewer processes than slots fill the first host", []Host{{"a", 2}, {"b", 2}}, 3, []Slot{
			{Host: "a", Rank: 0, LocalRank: 0, LocalSize: 2, CrossRank: 0, CrossSize: 2, Size: 3},
			{Host: "a", Rank: 1, LocalRank: 1, LocalSize: 2, CrossRank: 0, CrossSize: 1, Size: 3},
			{Host: "b", Rank: 2, LocalRank: 0, LocalSize: 1, CrossRank: 1, CrossSize: 2, Size: 3},
		}},
		{"unused host left out", []Host{{"a", 2}, {"b", 2}}, 2, []Slot{
			{Host: "a", Rank: 0, LocalRank: 0, LocalSize: 2, CrossRank: 0, CrossSize: 1, Size: 2},
			{Host: "a", Rank: 1, LocalRank: 1, LocalSize: 2, CrossRank: 0, CrossSize: 1, Size: 2},
		}},
		{"homogeneous", []Host{{"a", 2}, {"b", 2}}, 4, []Slot{
			{Host: "a", Rank: 0, LocalRank: 0, LocalSize: 2, CrossRank: 0, CrossSize: 2, Size: 4},
			{Host: "a", Rank: 1, LocalRank: 1, LocalSize: 2, CrossRank: 0, CrossSize: 2, Size: 4},
			{Host: "b", Rank: 2, LocalRank: 0, LocalSize: 2, CrossRank: 1, CrossSize: 2, Size: 4},
			{Host: "b", Rank: 3, LocalRank: 1, LocalSize: 2, CrossRank: 1, CrossSize: 2, Size: 4},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Assign(tt.hosts, tt.np)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Assign = %+v, %v\nwant %+v", got, err, tt.want)
			}
		})
	}
	_, err := Assign([]Host{{"a", 2}, {"b", 1}}, 4)
	if err == nil || !IsUsage(err) || !strings.Contains(err.Error(), "requested more processes (4) than there are available slots (3)") {
		t.Errorf("Assign over capacity: %v", err)
	}
}
