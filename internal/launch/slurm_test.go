package launch

import (
	"reflect"
	"strings"
	"testing"
)

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
