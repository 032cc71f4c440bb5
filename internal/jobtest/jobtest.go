package jobtest

import (
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"

	hvd "github.com/gohorovod/gohorovod/runtime"
)

// Main initialises rt (logging nothing, with opts; Init chooses the
// transport from the environment), runs m's tests, shuts rt down and
// exits. It exits with 2, naming what (the tests, for the message), when
// Init fails, and with 1 when Shutdown fails after passing tests.
func Main(m *testing.M, rt *hvd.Runtime, what string, opts ...hvd.Option) {
	if err := rt.Init(append([]hvd.Option{hvd.WithLogger(zerolog.Nop())}, opts...)...); err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(2)
	}
	code := m.Run()
	if err := rt.Shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, "Shutdown:", err)
		code = 1
	}
	os.Exit(code)
}
