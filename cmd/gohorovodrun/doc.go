// Command gohorovodrun starts a gohorovod training job, as horovodrun
// does: gohorovodrun -np 4 ./train on one machine, or
// gohorovodrun -np 16 -H h1:4,h2:4,h3:4,h4:4 ./train on a cluster. It runs
// the job under mpirun (Open MPI, MPICH or Intel MPI), or with --gloo
// (the default when mpirun is not on PATH) starts the workers itself on
// gohorovod's embedded transport (docs/EMBEDDED.md); it passes the
// HOROVOD_* knobs to every worker, and exits with the first failing
// rank's status. Run gohorovodrun --help for the flags; the logic is in
// internal/launch.
package main
