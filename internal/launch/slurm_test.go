package launch

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

func TestSlurmHosts(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    []Host
		inAlloc bool
		wantErr string
	}{
		{"no allocation", map[string]string{}, nil, false, ""},
		{"tasks per node", map[string]string{"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"},
			[]Host{{"n1", 2}, {"n2", 2}, {"n3", 1}}, true, ""},
		{"ntasks per node", map[string]string{"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS_PER_NODE": "4"},
			[]Host{{"n1", 4}, {"n2", 4}}, true, ""},
		{"cpus per node", map[string]string{"SLURM_JOB_NODELIST": "n1,n2", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"},
			[]Host{{"n1", 8}, {"n2", 8}}, true, ""},
		{"count mismatch", map[string]string{"SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2"},
			nil, true, "lists 3 nodes but the task counts cover 1"},
		{"no counts", map[string]string{"SLURM_JOB_NODELIST": "n1"}, nil, true, "says how many tasks"},
		{"bad counts", map[string]string{"SLURM_JOB_NODELIST": "n1", "SLURM_TASKS_PER_NODE": "two"}, nil, true, "SLURM_TASKS_PER_NODE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, in, err := SlurmHosts(func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			if in != tt.inAlloc {
				t.Errorf("in allocation = %v, want %v", in, tt.inAlloc)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SlurmHosts = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
