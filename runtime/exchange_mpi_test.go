//go:build (mpi && cgo) || gloo

package runtime

import "testing"

func TestMPIExchange(t *testing.T) {
	opts, even, odd := staticParitySets(world.Size())
	r, err := psRuntime(t, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := scenarioExchange(r, even, odd); err != nil {
		t.Fatal(err)
	}
	if err := scenarioExchangeErrors(r); err != nil {
		t.Fatal(err)
	}
}
