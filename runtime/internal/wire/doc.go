// Package wire defines the messages that ranks exchange to agree on which
// collective operations are ready — Request and RequestList (what a rank has
// submitted), Response and ResponseList (what every rank must perform, in
// order) — and a compact binary encoding for them. It also encodes every
// other message the ranks exchange: the farewell record each rank gives
// when the ranks stop, the process set registrations (at Init and
// dynamic), the autotuning setting rank 0 broadcasts, the settings the
// ranks compare at Init, and the heartbeat channel's set-up.
//
// The encoding is little-endian with unsigned varints for lengths and counts.
// Decoders validate every length against the input, so arbitrary bytes decode
// to an error, never to a panic or an oversized allocation.
package wire
