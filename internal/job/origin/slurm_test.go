package origin

import (
	"reflect"
	"strings"
	"testing"
)

func TestExpandNodeList(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{"node1", []string{"node1"}, ""},
		{"node[01-03,07]", []string{"node01", "node02", "node03", "node07"}, ""},
		{"node[01-03,07],gpu5", []string{"node01", "node02", "node03", "node07", "gpu5"}, ""},
		{"a[8-10]", []string{"a8", "a9", "a10"}, ""},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}, ""},
		{"x[1],y[2-3].ib", []string{"x1", "y2.ib", "y3.ib"}, ""},
		{"node[1-3", nil, "unbalanced '['"},
		{"node1-3]", nil, "unbalanced ']'"},
		{"node[3-1]", nil, "bad range"},
		{"node[a-b]", nil, "bad range"},
		{"", nil, "names no hosts"},
	}
	for _, tt := range tests {
		got, err := ExpandNodeList(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ExpandNodeList(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ExpandNodeList(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"4", []int{4}, false},
		{"2(x3),1", []int{2, 2, 2, 1}, false},
		{"1,3(x2)", []int{1, 3, 3}, false},
		{"2(3)", nil, true},
		{"0", nil, true},
		{"2(x0)", nil, true},
		{"x", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseTasksPerNode(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && !reflect.DeepEqual(got, tt.want)) {
			t.Errorf("ParseTasksPerNode(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}
