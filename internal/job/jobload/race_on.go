//go:build race

package jobload

// RaceEnabled says whether this binary was built with the race detector,
// which allows at most 8128 live goroutines in a process: too few for
// 10,000 clients (or a server of 10,000 connections) in one.
const RaceEnabled = true
