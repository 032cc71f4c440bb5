package elastic_test

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/internal/launch/elastic"
)

// A job on one host grows when a second host appears: the coordinator is
// told, the workers reset at their next commit, and a new round starts the
// new host's workers after the old ones.
func Example() {
	now := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	d, _ := elastic.New(elastic.Config{NP: 2, MaxNP: 4}, now)
	show := func(dec elastic.Decision) {
		if dec.Round != nil {
			fmt.Println("round", dec.Round.ID, "size", len(dec.Round.Slots), "start", dec.Start)
		}
		if dec.Notify != elastic.NoUpdate {
			fmt.Println("notify", dec.Notify)
		}
	}
	hs, _ := elastic.ParseDiscovery("a:2\n", 0)
	show(d.Step(now, elastic.Discovered{Hosts: hs}))
	hs, _ = elastic.ParseDiscovery("a:2\nb\n", 2)
	show(d.Step(now.Add(time.Second), elastic.Discovered{Hosts: hs}))
	d.Step(now.Add(2*time.Second), elastic.Ready{Slot: elastic.Slot{Host: "a", Local: 0}})
	show(d.Step(now.Add(2*time.Second), elastic.Ready{Slot: elastic.Slot{Host: "a", Local: 1}}))
	fmt.Println("resets", d.Resets())
	// Output:
	// round 1 size 2 start [a[0] a[1]]
	// notify added
	// round 2 size 4 start [b[0] b[1]]
	// resets 1
}
