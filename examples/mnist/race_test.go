//go:build race

package main

// raceDetector: the test binary runs under the race detector, which slows
// the training several times over.
const raceDetector = true
