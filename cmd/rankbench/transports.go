package main

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
)

// transports build a job's launcher commands at np ranks.
var transports = map[string]func(o *opts, np int) (spec, error){
	"gloo": func(o *opts, np int) (spec, error) {
		return spec{argvs: [][]string{o.argv(filepath.Join(o.bin, "gohorovodrun"), "--gloo", "-np", strconv.Itoa(np))}}, nil
	},
	"mpi": func(o *opts, np int) (spec, error) {
		return spec{argvs: [][]string{o.argv("scripts/mpirun.sh", strconv.Itoa(np))}}, nil
	},
	"hvdrun-mpi": func(o *opts, np int) (spec, error) {
		return spec{argvs: [][]string{o.argv(filepath.Join(o.bin, "gohorovodrun"), "-np", strconv.Itoa(np))}}, nil
	},
	"emu": emuSpec,
}

// argv is the launcher's words, then the program and its arguments.
func (o *opts) argv(launcher ...string) []string {
	return append(append(append([]string(nil), launcher...), o.program), o.args...)
}

// emuPort is the rendezvous port of the next emulated job: a fresh one
// each time (the last may still be in TIME_WAIT).
var emuPort = 29400

// emuSpec runs the embedded transport across the emulated nodes: one
// gohorovodrun --nnodes launcher per node, np over the nodes ranks each.
func emuSpec(o *opts, np int) (spec, error) {
	n := o.emuNodes
	if np%n != 0 {
		return spec{}, fmt.Errorf("np %d does not divide into %d nodes", np, n)
	}
	emuPort++
	nodes := o.cluster.Nodes()
	var s spec
	for i := range n {
		s.argvs = append(s.argvs, o.cluster.CommandArgv(i, o.argv(filepath.Join(o.bin, "gohorovodrun"),
			"--nnodes", strconv.Itoa(n), "--node-rank", strconv.Itoa(i), "--nproc-per-node", strconv.Itoa(np/n),
			"--master-addr", nodes[0].Host, "--master-port", strconv.Itoa(emuPort))...))
	}
	s.env = []string{"GOHOROVOD_SECRET=" + o.secret}
	return s, nil
}

func numCPU() int { return runtime.NumCPU() }
