package config_test

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/config"
)

// A launcher turns its flags into a Config and passes Environ to the
// workers; each worker reads it back with FromEnv (os.LookupEnv there).
func Example() {
	c := config.Default()
	c.CycleTime = 2500 * time.Microsecond
	c.StallShutdownTime = 30 * time.Second
	env := c.Environ()
	fmt.Println(env[1], env[7])

	got, err := config.FromEnv(config.Lookup(env))
	fmt.Println(got == c, err)
	// Output:
	// HOROVOD_CYCLE_TIME=2.5 HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=30
	// true <nil>
}
