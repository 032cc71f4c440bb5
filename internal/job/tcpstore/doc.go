// Package tcpstore is a client of torch's TCPStore, the key-value store
// through which torchrun's workers meet: torchrun's agent serves one at
// MASTER_ADDR:MASTER_PORT when it sets TORCHELASTIC_USE_AGENT_STORE=True.
// gohorovod's workers started by torchrun publish their addresses there
// and read their peers', instead of hosting a rendezvous of their own on a
// port that the agent already holds.
//
// The protocol covered is the one of torch 1.x (tested against the server
// of torch 1.13, Debian 12's python3-torch): every request is one byte of
// query type, then its arguments; a string or a byte vector is its length
// as a little-endian uint64 and its bytes; numbers are little-endian. The
// store has no authentication: what gohorovod puts there is public (the
// addresses its workers listen at), and every connection between workers
// still proves the job secret. torch 2's servers added a validation
// message and other queries; they are not covered.
package tcpstore
