//go:build race

package main

// raceDetector: the test binary runs under the race detector, which slows
// GoMLX's Go kernels about fortyfold.
const raceDetector = true
