package runtime

import (
	goruntime "runtime"

	"github.com/rs/zerolog"
)

// Bounds of the goroutine dump: the buffer starts at stackStartBytes and
// doubles until the stacks fit, up to stackMaxBytes (the dump is then cut
// and says so).
const (
	stackStartBytes = 64 << 10
	stackMaxBytes   = 64 << 20
)

// dumpStacks writes the stacks of every goroutine of the process to log at
// error level, in one event whose message starts with reason (why the dump
// is made, e.g. that the stall inspector shuts the job down): what a hang's
// post-mortem needs, where each training goroutine was when the job gave
// up. The runtime's logger carries the rank field. The stacks are in the
// message rather than a field because the default console writer quotes a
// field with newlines onto one line, and prints a message as it is.
func dumpStacks(log zerolog.Logger, reason string) {
	ev := log.Error()
	if !ev.Enabled() {
		return
	}
	buf, cut := allStacks(stackStartBytes, stackMaxBytes)
	ev = ev.Int("goroutines", goruntime.NumGoroutine())
	if cut {
		ev = ev.Bool("truncated", true)
	}
	ev.Msg(reason + "; goroutine stacks follow:\n" + string(buf))
}

// allStacks returns runtime.Stack's dump of every goroutine, growing the
// buffer from start bytes until the dump fits or the buffer reaches limit
// bytes; cut reports that it did not fit.
func allStacks(start, limit int) (buf []byte, cut bool) {
	size := min(start, limit)
	for {
		buf = make([]byte, size)
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			return buf[:n], false
		}
		if size >= limit {
			return buf[:n], true
		}
		size = min(2*size, limit)
	}
}
