// Package negotiate is the coordinator's decision logic: given the requests
// each rank has submitted, it counts readiness per tensor name, validates
// that all ranks agree on the operation (dtype, op, shape, reduction, scale
// factors, root, device), handles Join, and produces the ordered list of
// responses that every rank performs.
//
// It is a pure state machine in the style of etcd's raft: no I/O, no clock,
// no goroutines. The runtime's background loop feeds it the request lists it
// gathered (Add) and asks for the responses of the cycle (Responses), so a
// whole multi-rank negotiation can be scripted in one goroutine in tests.
// Where time matters (when each rank last submitted something, which the
// stall inspector reports), the caller passes it (AddAt, TouchAll).
//
// Error texts follow Horovod's (Controller::ConstructResponse) word for word,
// so that users and their searches recognise them.
package negotiate
