// Package memcomm is the in-memory transport: a group of N ranks that run
// as goroutines of one process (NewGroup, NewGroupNodes, NewGroupWith),
// implementing the contract of package comm with its exact semantics,
// agreement checks included (through internal/agree, like every
// transport). Simulated nodes give SplitLocal something to split; a timeout
// (GroupOptions.Timeout) turns a rank that never arrives into a
// *TimeoutError on every other. The runtime's tests, the conformance suite
// and the fault wrapper run on it.
package memcomm
