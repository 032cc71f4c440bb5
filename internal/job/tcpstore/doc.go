// Package tcpstore is a client of torch's TCPStore, the key-value store
// through which torchrun's workers meet: torchrun's agent serves one at
// MASTER_ADDR:MASTER_PORT when it sets TORCHELASTIC_USE_AGENT_STORE=True.
// gohorovod's workers started by torchrun publish their addresses there
// and read their peers', instead of hosting a rendezvous of their own on a
// port that the agent already holds.
//
// Two generations of the protocol are covered, and Dial probes the server
// to learn which it speaks. torch 1.x's (tested against the server of
// torch 1.13, Debian 12's python3-torch): every request is one byte of
// query type, then its arguments; a string or a byte vector is its length
// as a uint64 and its bytes; numbers are in the host's byte order
// (little-endian here). torch 2's (its libuv server, the default since
// torch 2.4, and its classic one): the same, but a connection must open
// with VALIDATE (query 0, then the uint32 magic 0x3C85F7CE), every other
// query's number moved up by one, and newer servers answer PING (query 13
// and a uint32 nonce) with the nonce, which torch 2's own clients send
// after VALIDATE. The probe sends VALIDATE and PING on a connection of its
// own: a new server echoes the nonce; a torch 2 server without PING, and a
// torch 1.x server (which reads VALIDATE as a SET with an impossible key
// length), close it; a second probe, VALIDATE then the number of keys in
// torch 2's numbering, tells those two apart. Tests run against torch
// 1.13's server and against tcpstoretest's torch 2 server, written from
// the protocol apart from this client.
// Not covered: torch 2.0-2.2's servers, which renumbered DELETE without
// asking for validation (and, briefly, prefixed every query with a magic
// number); Delete would reach another query there.
//
// The store has no authentication: what gohorovod puts there is public
// (the addresses its workers listen at), and every connection between
// workers still proves the job secret.
package tcpstore
