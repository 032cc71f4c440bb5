//go:build !unix

package optim

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }
