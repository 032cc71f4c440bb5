//go:build (mpi && cgo) || gloo

package runtime

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/gohorovod/gohorovod/mpi"
)

// aloneEnv starts this test binary in aloneChild's mode (see TestMain).
const aloneEnv = "GOHOROVOD_TEST_INIT_ALONE"

const aloneMark = "init alone: ok"

// aloneChild runs in a copy of the multi-process test binary started
// without the launcher's variables: Init must run it as one rank in memory,
// without initialising MPI, twice in a row.
func aloneChild() int {
	for round := range 2 {
		l, buf := debugLog()
		r := new(Runtime)
		if err := r.Init(WithConfig(testConfig()), WithLogger(l)); err != nil {
			fmt.Printf("round %d: Init alone: %v\n", round, err)
			return 1
		}
		if r.MPIEnabled() || mpi.Initialized() || !strings.Contains(buf.String(), `"transport":"single"`) {
			fmt.Printf("MPIEnabled %v, MPI initialised %v, log %s; want one rank in memory\n",
				r.MPIEnabled(), mpi.Initialized(), buf)
			return 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := checkOneRank(ctx, r)
		cancel()
		if err != nil {
			fmt.Println(err)
			return 1
		}
		if err := r.Shutdown(); err != nil {
			fmt.Println(err)
			return 1
		}
	}
	fmt.Println(aloneMark)
	return 0
}

// TestInitAloneMPIBuild starts this binary again without the launcher's
// variables (mpirun's, and gohorovodrun --gloo's HOROVOD_* and
// GOHOROVOD_*): built with MPI, a process alone still runs as one rank, in
// memory (see useMPI); so does the "gloo" build without MPI. Rank 0 runs it
// for the job.
func TestInitAloneMPIBuild(t *testing.T) {
	if world.Rank() != 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OMPI_") && !strings.HasPrefix(kv, "PMIX_") && !strings.HasPrefix(kv, "PMI_") &&
			!strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "HOROVOD_") && !strings.HasPrefix(kv, "GOHOROVOD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, aloneEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), aloneMark) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestMPIInitUnderLauncher: started by mpirun, Init without a communicator
// runs over MPI, and says so.
func TestMPIInitUnderLauncher(t *testing.T) {
	skipEmbedded(t, "Init without a communicator under mpirun; over the embedded transport a process joins the "+
		"rendezvous once, in TestMain (TestInitEmbedded, embedded_test.go, covers Init over it)")
	l, buf := debugLog()
	r := new(Runtime)
	if err := r.Init(WithConfig(testConfig()), WithoutMPIFinalize(), WithLogger(l)); err != nil {
		t.Fatal(err)
	}
	defer func() {
		r.Shutdown()
		world.Barrier()
	}()
	if !r.MPIEnabled() || r.Size() != world.Size() || r.Rank() != world.Rank() {
		t.Errorf("MPIEnabled %v, rank %d of %d; want MPI's rank %d of %d",
			r.MPIEnabled(), r.Rank(), r.Size(), world.Rank(), world.Size())
	}
	if !strings.Contains(buf.String(), `"transport":"mpi"`) {
		t.Errorf("Init's log does not name MPI: %s", buf)
	}
	if err := r.Barrier(mpiCtx(t)); err != nil {
		t.Error(err)
	}
}
