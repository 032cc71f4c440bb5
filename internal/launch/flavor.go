package launch

import (
	"fmt"
	"strings"
)

// Flavor is an MPI implementation, as told by `mpirun --version`.
type Flavor int

// The flavours the launcher knows how to drive.
const (
	FlavorUnknown Flavor = iota
	OpenMPI              // Open MPI (also IBM Spectrum MPI, which is built on it)
	MPICH                // MPICH and its Hydra process manager
	IntelMPI             // Intel MPI (Hydra-based, -ppn placement)
)

// String implements fmt.Stringer.
func (f Flavor) String() string {
	switch f {
	case OpenMPI:
		return "Open MPI"
	case MPICH:
		return "MPICH"
	case IntelMPI:
		return "Intel MPI"
	}
	return "unknown MPI"
}

// DetectFlavor reads the output of `mpirun --version`. Intel is checked
// before MPICH because Intel's mpirun is Hydra too.
func DetectFlavor(versionOutput string) (Flavor, error) {
	switch out := versionOutput; {
	case strings.Contains(out, "Open MPI"), strings.Contains(out, "OpenRTE"), strings.Contains(out, "IBM Spectrum MPI"):
		return OpenMPI, nil
	case strings.Contains(out, "Intel(R) MPI"):
		return IntelMPI, nil
	case strings.Contains(out, "MPICH"), strings.Contains(out, "HYDRA"):
		return MPICH, nil
	}
	first, _, _ := strings.Cut(strings.TrimSpace(versionOutput), "\n")
	return FlavorUnknown, fmt.Errorf("mpirun --version printed %q, which is not Open MPI, MPICH or Intel MPI: "+
		"put one of those first on PATH (make deps installs Open MPI)", first)
}
