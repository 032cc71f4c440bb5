// Package fusion plans tensor fusion: it packs consecutive ready allreduce
// responses that share element type, reduction, scale factors and devices
// into one response, up to a byte threshold, so that one collective over a
// fusion buffer replaces many small ones. A look-ahead skips over a few
// responses that do not match (mixed precision interleaves dtypes) and keeps
// them, in order, for the following fused groups. Responses larger than
// Planner.MaxFused are never fused: copying them through the fusion buffer
// costs more than the call they would share, so they run alone, in place.
//
// The planner is pure and reuses its memory from cycle to cycle, so the
// steady state allocates nothing.
package fusion
