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
// Not every variable is implemented yet: the hierarchical collectives
// (HOROVOD_HIERARCHICAL_ALLREDUCE, HOROVOD_HIERARCHICAL_ALLGATHER),
// autotuning (HOROVOD_AUTOTUNE and its HOROVOD_AUTOTUNE_* parameters),
// HOROVOD_MPI_THREADS_DISABLE and the placement variables (HOROVOD_RANK,
// HOROVOD_SIZE, HOROVOD_LOCAL_*, HOROVOD_CROSS_*, HOROVOD_HOSTNAME) are
// parsed and passed on but have no effect. Config.Unimplemented lists those
// that a Config sets, and the runtime logs a warning naming each at Init.
//
// Some knobs must be the same on every rank, or the ranks would make
// different transport calls: Config.Agreed lists them, AppendSettings and
// DecodeSettings carry them between ranks, and CheckAgreement compares
// every rank's values and names each knob that differs with each rank's
// value. The runtime runs that check at Init and fails on every rank when
// the ranks disagree.
package config
