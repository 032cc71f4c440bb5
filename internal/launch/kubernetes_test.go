package launch

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gohorovod/gohorovod/runtime/config"
)

// k8sDir holds the example manifests.
const k8sDir = "../../examples/kubernetes"

// container is what the test reads of a pod's container (or of a
// TrainJob's trainer): its command line and its variables.
type container struct {
	Name    string
	Image   string
	Command []string
	Args    []string
	Env     []struct {
		Name      string
		Value     string
		ValueFrom map[string]any `yaml:"valueFrom"`
	}
	Ports []struct {
		Name          string
		ContainerPort int `yaml:"containerPort"`
	}
}

func readManifest(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k8sDir, name))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// replicaSpec is a replica of an MPIJob or PyTorchJob.
type replicaSpec struct {
	Replicas      int    `yaml:"replicas"`
	RestartPolicy string `yaml:"restartPolicy"`
	Template      struct {
		Spec struct {
			Containers []container `yaml:"containers"`
		} `yaml:"spec"`
	} `yaml:"template"`
}

type meta struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
}

// launcherEnv are the variables the launcher itself reads, beyond
// runtime/config's.
var launcherEnv = map[string]bool{
	EnvPetNNodes: true, EnvPetNodeRank: true, EnvPetNProcPerNode: true, EnvPetMasterAddr: true, EnvPetMasterPort: true,
	EnvMasterAddr: true, EnvMasterPort: true, EnvOMPIHostfile: true, EnvStartTimeout: true, EnvElasticTimeout: true,
}

// checkEnv refuses a variable that neither the launcher nor the runtime
// reads, and returns the container's variables with secrets given a
// sample value.
func checkEnv(t *testing.T, c container) []string {
	t.Helper()
	known := map[string]bool{}
	for _, n := range config.Names() {
		known[n] = true
	}
	var env []string
	for _, e := range c.Env {
		if !known[e.Name] && !launcherEnv[e.Name] {
			t.Errorf("container %s sets %s, which neither gohorovodrun nor the runtime reads", c.Name, e.Name)
		}
		v := e.Value
		if e.ValueFrom != nil {
			if _, ok := e.ValueFrom["secretKeyRef"]; !ok {
				t.Errorf("container %s: %s comes from %v, want a secretKeyRef", c.Name, e.Name, e.ValueFrom)
			}
			v = strings.Repeat("5a", 32)
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// expand replaces Kubernetes' $(VAR) references with env's values.
func expand(t *testing.T, args []string, env []string) []string {
	t.Helper()
	lookup := config.Lookup(env)
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(a, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := lookup(name)
			if !ok {
				t.Errorf("%s refers to $(%s), which the pod does not have", a, name)
			}
			return v
		})
	}
	return out
}

// mnistFlags are the flags the MNIST example defines.
func mnistFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../../examples/mnist/main.go")
	if err != nil {
		t.Fatal(err)
	}
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`fs\.\w+Var\(&o\.\w+, "([a-z0-9-]+)"`).FindAllStringSubmatch(string(b), -1) {
		flags[m[1]] = true
	}
	if !flags["epochs"] {
		t.Fatal("found no --epochs among the MNIST example's flags")
	}
	return flags
}

// dryRun runs the real launcher on a container's command line (with its
// program replaced by a local stand-in, after checking that it is the
// MNIST example the images hold and that its flags are the example's)
// with the pod's environment, and returns what it printed.
//
// extra flags go before the container's: a test machine cannot resolve the
// workers' service names, so the MPIJob's dry run names the interface of
// the rendezvous instead of finding the route to them.
func dryRun(t *testing.T, c container, env []string, isLocal func(string) bool, extra ...string) string {
	t.Helper()
	argv := append(append([]string(nil), c.Command...), c.Args...)
	argv = expand(t, argv, env)
	if len(argv) == 0 || path.Base(argv[0]) != "gohorovodrun" {
		t.Fatalf("container %s runs %v, want gohorovodrun", c.Name, argv)
	}
	o, err := Parse(argv[1:], &strings.Builder{})
	if err != nil {
		t.Fatalf("container %s: gohorovodrun refuses %v: %v", c.Name, argv[1:], err)
	}
	prog := o.Command
	if path.Base(prog[0]) != "mnist" {
		t.Fatalf("container %s runs %s, want the MNIST example", c.Name, prog[0])
	}
	flags := mnistFlags(t)
	for _, a := range prog[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok && !flags[strings.SplitN(name, "=", 2)[0]] {
			t.Errorf("container %s: the MNIST example has no flag %s", c.Name, a)
		}
	}
	f := newFixture(t, env...)
	f.l.IsLocal = isLocal
	args := append(append(append([]string{"--dry-run"}, extra...), argv[1:len(argv)-len(prog)]...), append([]string{f.prog}, prog[1:]...)...)
	if err := f.l.Run(context.Background(), args); err != nil {
		t.Fatalf("container %s: gohorovodrun %v: %v\n%s", c.Name, args, err, f.err.String())
	}
	return f.out.String()
}

func TestKubernetesMPIJob(t *testing.T) {
	var job struct {
		meta `yaml:",inline"`
		Spec struct {
			SlotsPerWorker    int                    `yaml:"slotsPerWorker"`
			MPIImplementation string                 `yaml:"mpiImplementation"`
			RunPolicy         map[string]any         `yaml:"runPolicy"`
			MPIReplicaSpecs   map[string]replicaSpec `yaml:"mpiReplicaSpecs"`
		} `yaml:"spec"`
	}
	readManifest(t, "mpijob.yaml", &job)
	if job.APIVersion != "kubeflow.org/v2beta1" || job.Kind != "MPIJob" || job.Spec.MPIImplementation != "OpenMPI" {
		t.Fatalf("%s %s %s: want a kubeflow.org/v2beta1 MPIJob for Open MPI", job.APIVersion, job.Kind, job.Spec.MPIImplementation)
	}
	l, w := job.Spec.MPIReplicaSpecs["Launcher"], job.Spec.MPIReplicaSpecs["Worker"]
	if len(job.Spec.MPIReplicaSpecs) != 2 || l.Replicas != 1 || w.Replicas < 1 || len(l.Template.Spec.Containers) != 1 || len(w.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Launcher and Workers, one container each: %+v", job.Spec.MPIReplicaSpecs)
	}
	if wc := w.Template.Spec.Containers[0]; path.Base(wc.Command[0]) != "sshd" {
		t.Errorf("the workers run %v, want sshd (the launcher reaches them over ssh)", wc.Command)
	}
	// The launcher pod as the operator makes it: the hostfile of the
	// workers' services, slotsPerWorker each, named by
	// OMPI_MCA_orte_default_hostfile.
	dir := t.TempDir()
	var hf strings.Builder
	for i := 0; i < w.Replicas; i++ {
		fmt.Fprintf(&hf, "%s-worker-%d.%s.default.svc slots=%d\n", job.Metadata.Name, i, job.Metadata.Name, job.Spec.SlotsPerWorker)
	}
	if err := os.WriteFile(filepath.Join(dir, "hostfile"), []byte(hf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	c := l.Template.Spec.Containers[0]
	env := append(checkEnv(t, c), EnvOMPIHostfile+"="+filepath.Join(dir, "hostfile"), "K_MPI_JOB_ROLE=launcher")
	out := dryRun(t, c, env, func(string) bool { return false }, "--network-interface", "lo")
	np := w.Replicas * job.Spec.SlotsPerWorker
	for r := 0; r < np; r++ {
		host := fmt.Sprintf("%s-worker-%d.%s.default.svc", job.Metadata.Name, r/job.Spec.SlotsPerWorker, job.Metadata.Name)
		if !strings.Contains(out, fmt.Sprintf("[rank %d on %s]", r, host)) {
			t.Errorf("rank %d is not on %s:\n%s", r, host, out)
		}
	}
}

func TestKubernetesPyTorchJob(t *testing.T) {
	var job struct {
		meta `yaml:",inline"`
		Spec struct {
			PyTorchReplicaSpecs map[string]replicaSpec `yaml:"pytorchReplicaSpecs"`
		} `yaml:"spec"`
	}
	readManifest(t, "pytorchjob.yaml", &job)
	if job.APIVersion != "kubeflow.org/v1" || job.Kind != "PyTorchJob" {
		t.Fatalf("%s %s: want a kubeflow.org/v1 PyTorchJob", job.APIVersion, job.Kind)
	}
	m, w := job.Spec.PyTorchReplicaSpecs["Master"], job.Spec.PyTorchReplicaSpecs["Worker"]
	if m.Replicas != 1 || len(m.Template.Spec.Containers) != 1 || len(w.Template.Spec.Containers) != 1 {
		t.Fatalf("want one Master and Workers: %+v", job.Spec.PyTorchReplicaSpecs)
	}
	// The operator's variables (its envvar.go and master.go): the port
	// named pytorchjob-port of the master's container named pytorch.
	port := 0
	for _, p := range m.Template.Spec.Containers[0].Ports {
		if p.Name == "pytorchjob-port" {
			port = p.ContainerPort
		}
	}
	if m.Template.Spec.Containers[0].Name != "pytorch" || port == 0 {
		t.Fatalf("the master's container must be named pytorch and have a port named pytorchjob-port")
	}
	world := m.Replicas + w.Replicas
	pods := []struct {
		c    container
		rank int
	}{{m.Template.Spec.Containers[0], 0}}
	for i := 0; i < w.Replicas; i++ {
		pods = append(pods, struct {
			c    container
			rank int
		}{w.Template.Spec.Containers[0], i + 1})
	}
	for _, p := range pods {
		env := append(checkEnv(t, p.c), "MASTER_ADDR="+job.Metadata.Name+"-master-0", "MASTER_PORT="+strconv.Itoa(port),
			"WORLD_SIZE="+strconv.Itoa(world), "RANK="+strconv.Itoa(p.rank), "PYTHONUNBUFFERED=0")
		out := dryRun(t, p.c, env, nil)
		checkNodeRanks(t, out, p.rank, world, job.Metadata.Name+"-master-0")
	}
}

// checkNodeRanks checks a node's dry run: its workers have the ranks of
// node rank (per node from the output), and meet at master.
func checkNodeRanks(t *testing.T, out string, rank, nodes int, master string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	per := len(lines)
	for lr, line := range lines {
		want := fmt.Sprintf("[rank %d on ", rank*per+lr)
		if !strings.HasPrefix(line, want) || !strings.Contains(line, "HOROVOD_GLOO_RENDEZVOUS_ADDR="+master) ||
			!strings.Contains(line, fmt.Sprintf("HOROVOD_SIZE=%d", nodes*per)) {
			t.Errorf("node %d, local rank %d: want %q, size %d, master %s:\n%s", rank, lr, want, nodes*per, master, out)
		}
	}
}

func TestKubernetesTrainJob(t *testing.T) {
	var job struct {
		meta `yaml:",inline"`
		Spec struct {
			RuntimeRef struct {
				Name     string `yaml:"name"`
				APIGroup string `yaml:"apiGroup"`
				Kind     string `yaml:"kind"`
			} `yaml:"runtimeRef"`
			Trainer struct {
				container      `yaml:",inline"`
				NumNodes       int `yaml:"numNodes"`
				NumProcPerNode int `yaml:"numProcPerNode"`
			} `yaml:"trainer"`
		} `yaml:"spec"`
	}
	readManifest(t, "trainjob.yaml", &job)
	if job.APIVersion != "trainer.kubeflow.org/v1alpha1" || job.Kind != "TrainJob" || job.Spec.RuntimeRef.Name != "torch-distributed" {
		t.Fatalf("%s %s on %q: want a trainer.kubeflow.org/v1alpha1 TrainJob on the torch-distributed runtime", job.APIVersion, job.Kind, job.Spec.RuntimeRef.Name)
	}
	tr := job.Spec.Trainer
	if tr.NumNodes < 1 || tr.NumProcPerNode < 1 {
		t.Fatalf("numNodes %d, numProcPerNode %d", tr.NumNodes, tr.NumProcPerNode)
	}
	// The torch plugin's variables (Trainer's pkg/runtime/framework/
	// plugins/torch): the node rank is the pod's job completion index,
	// the master node 0's pod of the trainer job, port 29400.
	master := job.Metadata.Name + "-node-0-0." + job.Metadata.Name
	for k := 0; k < tr.NumNodes; k++ {
		env := append(checkEnv(t, tr.container), "PET_NNODES="+strconv.Itoa(tr.NumNodes), "PET_NPROC_PER_NODE="+strconv.Itoa(tr.NumProcPerNode),
			"PET_NODE_RANK="+strconv.Itoa(k), "PET_MASTER_ADDR="+master, "PET_MASTER_PORT=29400")
		out := dryRun(t, tr.container, env, nil)
		if n := strings.Count(out, "[rank "); n != tr.NumProcPerNode {
			t.Errorf("node %d plans %d workers, want %d:\n%s", k, n, tr.NumProcPerNode, out)
		}
		checkNodeRanks(t, out, k, tr.NumNodes, master)
	}
}
