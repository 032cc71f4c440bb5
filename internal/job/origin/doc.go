// Package origin says how a worker that gohorovodrun did not start finds
// its place in the job: from the variables that SLURM's srun, torchrun
// (and torch.distributed.launch), Kubeflow's PyTorchJob or Volcano give
// every process they start. Detect reads them (pure: the environment comes
// in as a lookup function) and returns a Placement: the engine, this
// worker's rank and the slots of every rank, and where the workers meet.
//
// Where the workers meet:
//   - torchrun's agent already serves torch's TCPStore at MASTER_ADDR:
//     MASTER_PORT when it says so (TORCHELASTIC_USE_AGENT_STORE=True, its
//     static rendezvous): the workers then meet through that store, as
//     clients of its protocol (internal/job/tcpstore);
//   - everywhere else nobody serves the address (PyTorchJob and Volcano
//     pods, torchrun's c10d rendezvous, srun), so rank 0 hosts gohorovod's
//     own rendezvous there (internal/job/rendezvous). Under srun the
//     address is the step's first node and a port derived from the job and
//     step ids (HOROVOD_GLOO_RENDEZVOUS_PORT overrides it).
//
// The job secret that every connection proves is GOHOROVOD_SECRET when it
// is set (a Kubernetes Secret, or exported before srun). Otherwise
// JobSecret derives one from a per-user key file (GOHOROVOD_KEY_FILE, by
// default ~/.gohorovod/key, created with mode 0600 on first use, and
// refused when others may read it) and the job's identity, so that only
// the user's processes of the same job can join it: home directories are
// shared by the nodes of nearly every cluster.
package origin
