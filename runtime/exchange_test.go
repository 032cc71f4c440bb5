package runtime

import (
	"fmt"
	"testing"
)

func TestExchange(t *testing.T) {
	for _, n := range []int{2, 3, 4} { // parity sets need two ranks
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			rts, evens, odds := startParity(t, n)
			(&cluster{rts: rts}).each(t, func(r *Runtime, rank int) error { return scenarioExchange(r, evens[rank], odds[rank]) })
		})
	}
}

func TestExchangeErrors(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("np", n), func(t *testing.T) {
			c := startCluster(t, n, testConfig())
			c.each(t, func(r *Runtime, _ int) error { return scenarioExchangeErrors(r) })
		})
	}
}
