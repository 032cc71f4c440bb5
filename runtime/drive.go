package runtime

import (
	"fmt"
	"time"

	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/steps"
)

// negotiate is the slow path of a cycle that decided d: every rank sends
// its uncached requests to rank 0, which validates them and broadcasts the
// ordered responses, which are added to d and to the response cache. The
// exchange is cycle.Negotiation's; this function performs its collectives
// and writes what rank 0's coordinator saw to the timeline.
func (l *loop) negotiate(d *cycle.Decision) error {
	l.r.stats.slow.Add(1)
	l.slow = true
	if l.checker != nil {
		l.checker.SetCheck(true)
		defer l.checker.SetCheck(false)
	}
	n := l.neg
	n.Begin(l.cyc.items, d.Uncached, l.global == nil && l.stopping())
	for st := n.Next(); st != nil; st = n.Next() {
		if err := steps.Do(l.com, st); err != nil {
			return fmt.Errorf("%s: %w", st.What, err)
		}
		now := time.Now()
		if err := n.Done(now); err != nil {
			return err
		}
		l.tl.negotiation(n.Events(), now)
	}
	list := n.Responses()
	if l.st.Negotiated(list) {
		l.log.Warn().Msg(cache.EvictionWarning(int(l.cfg.CacheCapacity)))
	}
	if l.log.Debug().Enabled() {
		l.log.logNegotiated(len(d.Uncached), list, l.st.Cache())
	}
	for range list.Responses {
		l.cyc.respEnts = append(l.cyc.respEnts, nil)
	}
	return nil
}
