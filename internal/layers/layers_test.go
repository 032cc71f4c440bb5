package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/gohorovod/gohorovod/"

// layer gives each package of the module its layer, by path within the
// module (a trailing "/..." covers a folder and everything under it; the
// longest match wins). Keep it in step with docs/ARCHITECTURE.md.
var layer = map[string]int{
	// The leaves: tensor memory and arithmetic.
	"tensor": 10,
	// The agreement rules every transport shares.
	"internal/agree": 15,
	// Bindings and other things that know nothing of the runtime.
	"mpi":                                    20,
	"mpi/internal/allreducebench":            21,
	"cuda":                                   20,
	"cuda/internal/gpucheck":                 21,
	"runtime/config":                         20,
	"internal/procid":                        20,
	"internal/cputime":                       20,
	"internal/cudamock":                      20,
	"internal/scaling":                       20,
	"internal/job/secret":                    20,
	"internal/emucluster":                    20,
	"internal/job/rendezvous":                21,
	"internal/job/tcpstore":                  20,
	"internal/job/tcpstore/tcpstoretest":     20,
	"internal/sockdir":                       20,
	"internal/preempt":                       20,
	"internal/job/origin":                    22,
	"internal/job/rendezvous/rendezvoustest": 22,
	"internal/job/fdlimit":                   20,
	"internal/job/jobload":                   22,
	"internal/elastichook":                   22,
	// The transports: the contract first, then each transport.
	"runtime/comm":          30,
	"runtime/comm/mpicomm":  31,
	"runtime/comm/embedded": 31,
	"runtime/comm/memcomm":  31,
	"runtime/comm/fault":    31,
	"runtime/comm/commtest": 31,
	// The runtime's pure decisions and its executors.
	"runtime/internal/wire":      40,
	"runtime/internal/timeline":  40,
	"runtime/internal/stall":     40,
	"runtime/internal/autotune":  40,
	"runtime/internal/schedule":  40,
	"runtime/internal/cache":     41,
	"runtime/internal/fusion":    41,
	"runtime/internal/negotiate": 41,
	"runtime/internal/gpupath":   41,
	"runtime/internal/hier":      41,
	"runtime/internal/liveness":  41,
	"runtime/internal/nccl":      41,
	"runtime/internal/cycle":     42,
	"runtime/internal/gpuexec":   42,
	"runtime/internal/steps":     43,
	// Opening the transports from the environment.
	"runtime/internal/transport": 45,
	// The public API.
	"runtime": 50,
	// The TestMain of the tests that run as the processes of one job.
	"internal/jobtest": 51,
	// Training: optimizers, then what builds on them.
	"optim":         60,
	"optim/data":    60,
	"optim/nn":      61,
	"optim/elastic": 62,
	"optim/preempt": 61,
	// Checkpoints of the elastic state.
	"optim/checkpoint": 63,
	// Programs and their helpers.
	"internal/mlp":                      70,
	"internal/elasticbench":             71,
	"internal/launch/elastic":           70,
	"internal/launch":                   71,
	"internal/layers":                   70,
	"cmd/hvdgpucheck/internal/gpucheck": 75,
	"examples/internal/mnist":           75,
	"cmd/...":                           80,
	"cuda/cmd/...":                      80,
	"examples/...":                      80,
}

// layerOf returns the layer of the package at path p (relative to the
// module) and whether the table has one.
func layerOf(p string) (int, bool) {
	best, n, ok := -1, 0, false
	for k, v := range layer {
		switch {
		case k == p:
			return v, true
		case strings.HasSuffix(k, "/...") && strings.HasPrefix(p+"/", strings.TrimSuffix(k, "...")):
			if len(k) > best {
				best, n, ok = len(k), v, true
			}
		}
	}
	return n, ok
}

// list runs go list with tags over the module and returns, for each of
// its packages, the module's packages that it imports (Imports) or
// depends on (Deps), relative to the module.
func list(t *testing.T, tags, field string) map[string][]string {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}{{range ." + field + "}} {{.}}{{end}}"}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command("go", append(args, module+"...")...)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], module) {
			continue
		}
		var ours []string
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module) {
				ours = append(ours, strings.TrimPrefix(d, module))
			}
		}
		m[strings.TrimPrefix(f[0], module)] = ours
	}
	if len(m) < 20 {
		t.Fatalf("go list found only %d packages", len(m))
	}
	return m
}

// tagSets are the builds the layers must hold in: the default one, with
// MPI, and the pure-Go embedded transport's.
var tagSets = []string{"", "mpi", "gloo"}

// TestLayers fails when a package has no layer or imports a package of its
// own layer or above.
func TestLayers(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	for _, tags := range tagSets {
		imports := list(t, tags, "Imports")
		var pkgs []string
		for p := range imports {
			pkgs = append(pkgs, p)
		}
		sort.Strings(pkgs)
		for _, p := range pkgs {
			lp, ok := layerOf(p)
			if !ok {
				t.Errorf("tags %q: package %s has no layer: give it one in layers_test.go and docs/ARCHITECTURE.md", tags, p)
				continue
			}
			for _, q := range imports[p] {
				lq, ok := layerOf(q)
				if ok && lq >= lp {
					t.Errorf("tags %q: %s (layer %d) imports %s (layer %d): an import may only run down a layer", tags, p, lp, q, lq)
				}
			}
		}
	}
}

// TestRoomsStayApart checks the separations that the layers alone do not
// say: the transports' contract does not drag in MPI, nothing in the
// runtime depends on training, and the tensor package is a leaf.
func TestRoomsStayApart(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	for _, tags := range tagSets {
		deps := list(t, tags, "Deps")
		for p, ds := range deps {
			for _, d := range ds {
				switch {
				case p == "tensor":
					t.Errorf("tags %q: tensor depends on %s: it must stay a leaf", tags, d)
				case p == "runtime/comm" && d == "mpi":
					t.Errorf("tags %q: runtime/comm depends on mpi: only runtime/comm/mpicomm may", tags)
				case (p == "runtime" || strings.HasPrefix(p, "runtime/")) && (d == "optim" || strings.HasPrefix(d, "optim/")):
					t.Errorf("tags %q: %s depends on %s: the runtime must not depend on training", tags, p, d)
				}
			}
		}
		if _, ok := deps["runtime/comm"]; !ok {
			t.Fatalf("tags %q: go list did not list runtime/comm", tags)
		}
	}
}

// transportRooms are the packages that know the transports, how a job is
// formed or the launcher's process: only runtime/internal/transport may use
// them for the runtime package, which knows the transports through the
// contract alone.
var transportRooms = []string{"mpi", "runtime/comm/mpicomm", "runtime/comm/embedded", "internal/job/...", "internal/procid"}

// TestRuntimeOpensNoTransport fails when the runtime package (its non-test
// files) imports a transport, MPI or job formation directly instead of
// through runtime/internal/transport.
func TestRuntimeOpensNoTransport(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	for _, tags := range tagSets {
		imports, ok := list(t, tags, "Imports")["runtime"]
		if !ok {
			t.Fatalf("tags %q: go list did not list runtime", tags)
		}
		for _, q := range imports {
			for _, room := range transportRooms {
				if q == room || strings.HasSuffix(room, "/...") && strings.HasPrefix(q+"/", strings.TrimSuffix(room, "...")) {
					t.Errorf("tags %q: runtime imports %s: open transports in runtime/internal/transport", tags, q)
				}
			}
		}
	}
}
