package rendezvous

import (
	"sync"
	"time"
)

// How a server logs the connections it refuses (a wrong secret, a slot
// not expected): the first refusalBurst one by one, then, so that a flood
// of connections cannot flood the launcher's output, one line every
// refusalEvery with the number refused since the last line. Variables for
// tests.
var (
	refusalBurst = 5
	refusalEvery = 10 * time.Second
)

// refusalLog rate-limits a server's lines about refused connections.
type refusalLog struct {
	mu     sync.Mutex
	shown  int // lines logged one by one
	hidden int // refusals since the last summary, not logged
	out    func(string, ...any)
	timer  *time.Timer
}

// logf logs one refusal through out (nil: nowhere), or counts it for the
// next summary.
func (r *refusalLog) logf(out func(string, ...any), format string, args ...any) {
	if out == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.out = out
	if r.shown < refusalBurst {
		r.shown++
		out(format, args...)
		if r.shown == refusalBurst {
			out("rendezvous: further refused connections are counted, and summed up every %v", refusalEvery)
		}
		return
	}
	r.hidden++
	if r.timer == nil {
		r.timer = time.AfterFunc(refusalEvery, r.summary)
	}
}

// summary logs the number of refusals counted since the last one.
func (r *refusalLog) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.summaryLocked()
}

func (r *refusalLog) summaryLocked() {
	if r.timer != nil {
		r.timer.Stop()
		r.timer = nil
	}
	if r.hidden > 0 && r.out != nil {
		r.out("rendezvous: refused %d more connections (not logged one by one)", r.hidden)
	}
	r.hidden = 0
}

// flush logs the refusals counted and not yet summed up (when the server
// closes).
func (r *refusalLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.summaryLocked()
}
