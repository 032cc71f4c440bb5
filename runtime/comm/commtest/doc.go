// Package commtest is the conformance suite for comm.Communicator: one list
// of collective test cases that every transport must pass, run against the
// in-memory group (RunGroup, all ranks as goroutines of one test) and
// against real MPI (RunRank, called by every process of an mpirun job).
//
// Every rank runs the cases in the same order. A case performs the same
// collectives on every rank whatever it finds, and returns what was wrong on
// its rank, so that a failure never leaves another rank waiting in a
// collective that this rank skipped. Values are chosen so that each rank's
// contribution is visible in the result and every result is exact, half
// precision included (the suite is sized for groups of up to 8 ranks).
//
// The fault cases ("fault/...") check what the other ranks learn when one
// rank tears a group down with comm.Aborter: a *comm.PeerError naming it.
// They run on a group split off the one under test, which stays usable, and
// pass without checking more on transports that cannot abort a group.
package commtest
