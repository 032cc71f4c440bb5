package emucluster

import (
	"strings"
	"testing"
)

func TestParseSSH(t *testing.T) {
	for _, tc := range []struct {
		args          string
		host, command string
	}{
		{"-o PasswordAuthentication=no -o StrictHostKeyChecking=no -o BatchMode=yes -o ConnectTimeout=10 -p 22 -i /k emu1-1 true", "emu1-1", "true"},
		{"-x 10.88.0.2 PATH=/usr/bin ; orted -mca ess env", "10.88.0.2", "PATH=/usr/bin ; orted -mca ess env"},
		{"-xT root@emu1-0 cd /tmp && ./w", "emu1-0", "cd /tmp && ./w"},
		{"-p22 emu1-2", "emu1-2", ""},
		{"-- emu1-2 echo -x", "emu1-2", "echo -x"},
	} {
		host, cmd, err := ParseSSH(strings.Fields(tc.args))
		if err != nil || host != tc.host || cmd != tc.command {
			t.Errorf("%q: host %q command %q err %v; want %q %q", tc.args, host, cmd, err, tc.host, tc.command)
		}
	}
	if _, _, err := ParseSSH([]string{"-o", "X=y"}); err == nil {
		t.Error("no host: no error")
	}
}

func TestNodeOf(t *testing.T) {
	o, _ := Options{Nodes: 3, Name: "k"}.validate(0)
	c := &Cluster{opts: o, nodes: o.nodes()}
	for host, want := range map[string]int{"k-0": 0, "k-2": 2, "10.88.0.2": 1, "localhost": 0} {
		if got, err := c.NodeOf(host); err != nil || got != want {
			t.Errorf("%s: %d %v, want %d", host, got, err, want)
		}
	}
	for _, host := range []string{"k-3", "10.88.0.4", "other"} {
		if _, err := c.NodeOf(host); err == nil || !strings.Contains(err.Error(), "no node of cluster k") {
			t.Errorf("%s: %v, want an error naming the cluster", host, err)
		}
	}
}
