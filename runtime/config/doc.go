// Package config is the one definition of gohorovod's run-time knobs: the
// Config type, the HOROVOD_* environment variable that carries each knob, the
// defaults, and the conversion in both directions.
//
// The runtime reads its configuration once, at Init, with
// FromEnv(os.LookupEnv); the launcher (gohorovodrun) turns its flags into a
// Config and hands the workers Environ()'s list. Both sides use the constants
// of this package for the variable names, and FromEnv and Environ are exact
// inverses: FromEnv(Lookup(c.Environ())) == c for every c that passes
// Validate.
//
// Variable names, units and defaults follow Horovod so that a Horovod user
// feels at home (HOROVOD_CYCLE_TIME is in milliseconds and may be
// fractional, HOROVOD_FUSION_THRESHOLD is in bytes, the stall times are in
// seconds). Two deliberate differences: the default fusion threshold (see
// DefaultFusionThreshold), and the stall times, which may be fractional
// seconds here (Horovod reads whole seconds; every whole-second value means
// the same thing in both).
//
// Not every variable is implemented yet: autotuning (HOROVOD_AUTOTUNE and
// its HOROVOD_AUTOTUNE_* parameters) and HOROVOD_MPI_THREADS_DISABLE are
// parsed and passed on but have no effect; so have the placement variables
// (HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_*, HOROVOD_CROSS_*) unless the
// Gloo controller is selected. HOROVOD_HOSTNAME names the worker's slot
// under Gloo and its node elsewhere (Config.Hostname). Config.Unimplemented lists those that a Config
// sets, and the runtime logs a warning naming each at Init.
//
// # Workers without MPI: the embedded transport's contract
//
// A worker runs on the embedded (Gloo-style) transport when
// HOROVOD_CONTROLLER=gloo, or when HOROVOD_CONTROLLER is unset and
// HOROVOD_GLOO_RENDEZVOUS_ADDR is set (Config.Gloo). gohorovodrun --gloo
// sets these for every worker; a worker started by hand or by another
// scheduler needs the ones marked "required" (docs/EMBEDDED.md has
// examples):
//
//	HOROVOD_CONTROLLER=gloo              selects the transport (HOROVOD_CPU_OPERATIONS=gloo is
//	                                     set with it, as horovodrun does; under MPI,
//	                                     HOROVOD_CPU_OPERATIONS alone moves host tensors to
//	                                     the embedded transport's TCP ring: see Config)
//	HOROVOD_GLOO_RENDEZVOUS_ADDR=ADDR    required: the rendezvous server's host or IP
//	HOROVOD_GLOO_RENDEZVOUS_PORT=PORT    required: its port
//	GOHOROVOD_SECRET=HEX                 required: the job's key, hex, at least 16 bytes
//	                                     (secret.New makes one); never logged, and
//	                                     formatted as [redacted] (Secret)
//	HOROVOD_HOSTNAME=NAME                required: the worker's host as the server's plan
//	                                     names it (gohorovodrun: the -H name)
//	HOROVOD_LOCAL_RANK=N                 required: the worker's index on that host
//	HOROVOD_RANK, HOROVOD_SIZE,          optional: the placement the launcher computed;
//	HOROVOD_LOCAL_SIZE,                  the worker checks its assignment against every
//	HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE one that is set
//	HOROVOD_GLOO_TIMEOUT_SECONDS=S       the rendezvous deadline (default 30, Horovod's)
//	GOHOROVOD_GLOO_ADDR=ADDR             the address the worker listens on and publishes
//	HOROVOD_GLOO_IFACE=NAME              else the first address of this interface
//	                                     (neither: the address this host uses to reach the
//	                                     rendezvous server, so 127.0.0.1 on one machine)
//
// The rendezvous server (internal/job/rendezvous) assigns ranks by the
// order of its plan, not by HOROVOD_RANK; the placement variables are a
// cross-check.
//
// Some knobs must be the same on every rank, or the ranks would make
// different transport calls: Config.Agreed lists them, the runtime carries
// them between ranks, and CheckAgreement compares
// every rank's values and names each knob that differs with each rank's
// value. The runtime runs that check at Init and fails on every rank when
// the ranks disagree.
package config
