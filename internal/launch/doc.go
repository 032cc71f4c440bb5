// Package launch is gohorovodrun: it turns horovodrun's command line into an
// mpirun command and runs it, or, with --gloo (the default when mpirun is
// not on PATH), runs the workers itself on the embedded transport.
//
// The work is split as DESIGN.md asks: Parse binds the flags (spf13/pflag,
// horovodrun's names, including the single-dash -np) into Options;
// Launcher.Spec gathers the facts (hosts from -H, --hostfile or a SLURM
// allocation; knobs from the environment and the flags through
// runtime/config; the MPI flavour from `mpirun --version`); BuildPlan, a pure
// function, computes the exact mpirun argv and environment for Open MPI,
// MPICH or Intel MPI; Launcher.Run checks ssh reachability of remote hosts,
// runs the plan, stops the job when the context ends, and reports the first
// failing rank and its exit status or signal (read from mpirun's report).
//
// A launcher killed with SIGKILL cannot stop its job, so two things stop
// it instead. The guard (GuardMain), a copy of gohorovodrun started beside
// mpirun, holds mpirun's pidfd and the read end of a pipe only the launcher
// writes to; when the launcher dies it sends mpirun one SIGTERM (SIGKILL
// after StopGrace), and mpirun stops the workers on every host. And every
// worker learns the launcher's identity (GOHOROVOD_LAUNCHER; pid, start
// time, boot id, pid namespace) and, on the launcher's host, exits when the
// launcher is gone (runtime/internal/transport/guard.go); on other hosts the MPI launcher's
// ssh connections close and Open MPI's daemons stop their ranks.
//
// Every way of running a job is a run path (runpath.go) with the same
// steps, which Launcher.drive sequences: plan, start, watch, tear down.
// mpiRun runs mpirun; glooRun its own workers on the embedded transport
// (a job of its own, or one node's workers); masterNodeRun and
// otherNodeRun are the nodes of a multi-node job; elasticRun and
// elasticMemberRun an elastic job and its other nodes. drive passes stop
// signals on to the paths that forward them and undoes, in reverse
// order, what plan and start set up, however the run ended.
//
// The launcher bounds its own teardown whatever mpirun does (mpiRun):
// mpirun runs in a process group of its own; after the first failure
// mpirun has FailureGrace to end the job, after an interrupt StopGrace;
// then the launcher signals every process of the job it finds in /proc
// (jobProcs), SIGTERM and SIGKILL StopGrace later. Open MPI's
// shared-memory segments of a job on this host alone live in a directory
// of the job's own (EnvVaderDir), removed when the job ends.
//
// Without MPI (--gloo), BuildGlooPlan, also pure, computes each worker's
// command and environment (docs/EMBEDDED.md has the contract): local
// workers are started directly, each in its own process group; remote ones
// through ssh, after the same reachability check, with the variables on
// the command line and the job's secret (new for every job) on ssh's
// standard input. The launcher runs the rendezvous server
// (internal/job/rendezvous) on a free port, tags every output line with
// the rank as Open MPI's --tag-output does, stops the other workers
// (SIGTERM, then SIGKILL after WorkerStopGrace) when one fails, and
// reports that one in the MPI path's words; a rendezvous that does not
// complete within HOROVOD_GLOO_TIMEOUT_SECONDS ends the job naming the
// missing host and local rank (*RendezvousError). The guard then holds a
// pidfd of every worker (and ssh) instead of mpirun's. The local workers'
// Unix sockets live in a directory the launcher makes for the job
// (jobSocketDir, GOHOROVOD_GLOO_SOCKET_DIR) and removes when it ends.
//
// Being told to stop (Launcher.Signals: SIGTERM, SIGUSR1, SIGINT) is the
// pure machine of internal/preempt at its edge (preempt.go): every run
// path passes the first signal on to its workers (mpirun as SIGUSR1) and
// waits for them to stop at a step boundary; workers that exit with
// ExitPreempted are no failure, and the launcher then exits with it too
// (ErrPreempted). A second signal, or the grace period, cancels the job's
// context: the usual stop.
//
// Elastic mode (--min-np, --max-np or --host-discovery-script; Options.
// Elastic) runs on the embedded transport too: runElastic feeds the pure
// driver of internal/launch/elastic the discovery script's output (every
// DiscoveryInterval, RunDiscovery), the workers' exits and the ready
// reports of a multi-round rendezvous server (rendezvous.RoundServer), and
// carries out its decisions: rendezvous rounds, workers started and stopped
// per slot (each tagged host[local] in the output, since its rank changes),
// host updates told to rank 0. A job that ends badly returns an
// *ElasticError with the driver's reason. docs/EMBEDDED.md describes it.
//
// Flags and variables for knobs that are not implemented yet
// (--mpi-threads-disable) are passed on but draw a warning on stderr; the
// placement variables of the launcher's own environment (HOROVOD_RANK, ...)
// are not passed on, since MPI places the workers.
//
// Bad input is a *UsageError (exit status 2) raised before anything starts.
// ExitCode maps Run's error to the exit status.
package launch
