// Package jobtest is the TestMain of the test binaries that run as the
// processes of one job (under mpirun, or gohorovodrun --gloo): one Runtime
// for the whole binary, initialised before the tests and shut down after
// them.
package jobtest
