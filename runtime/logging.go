package runtime

import (
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/gohorovod/gohorovod/runtime/config"
	"github.com/gohorovod/gohorovod/runtime/internal/cache"
	"github.com/gohorovod/gohorovod/runtime/internal/cycle"
	"github.com/gohorovod/gohorovod/runtime/internal/fusion"
	"github.com/gohorovod/gohorovod/runtime/internal/wire"
)

// timeLayout is the default logger's timestamp: RFC 3339 with
// milliseconds, so that lines from a job's ranks can be put in order.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// consoleLogger returns the default logger: human-readable lines on w,
// stamped with timeLayout (unless HOROVOD_LOG_HIDE_TIME), with the rank,
// at HOROVOD_LOG_LEVEL.
//
// The stamp is written by a hook rather than by zerolog's Timestamp, whose
// precision is the package-global zerolog.TimeFieldFormat (seconds by
// default), which a library should not change under its user.
func consoleLogger(w io.Writer, cfg config.Config, rank int) zerolog.Logger {
	cw := zerolog.ConsoleWriter{Out: w, NoColor: true, FormatTimestamp: func(v any) string {
		s, _ := v.(string)
		return s
	}}
	if cfg.LogHideTime {
		cw.PartsExclude = []string{zerolog.TimestampFieldName}
	}
	log := zerolog.New(cw)
	if !cfg.LogHideTime {
		log = log.Hook(stampHook{})
	}
	return log.With().Int("rank", rank).Logger().Level(zlevel(cfg.LogLevel))
}

// stampHook adds the time, as timeLayout, to every line written.
type stampHook struct{}

func (stampHook) Run(e *zerolog.Event, _ zerolog.Level, _ string) {
	var b [len(timeLayout) + 8]byte
	e.Bytes(zerolog.TimestampFieldName, time.Now().AppendFormat(b[:0], timeLayout))
}

// The background loop's debug and trace lines. Debug has what the loop
// decided (negotiation's responses, fusion, cache evictions and
// invalidations, the GPU path), trace adds every non-idle cycle and every
// operation performed. Each helper below is called behind a level check
// at its call site, so that at the default level the loop pays a
// comparison and builds nothing.

const (
	logNames     = 4 // names listed per response, then how many more
	logResponses = 8 // responses listed per negotiation (errors always)
	logWords     = 8 // agreement words listed, then how many more
)

// describe returns a short text for a response: its type, its element
// type, its names (the first logNames) and, for an error, the message:
// "ALLREDUCE float32 [fc1.w fc1.b]".
func describe(r *wire.Response) string {
	var b strings.Builder
	b.WriteString(r.Type.String())
	if r.Type != wire.Error {
		b.WriteByte(' ')
		b.WriteString(r.DType.String())
	}
	b.WriteString(" [")
	b.WriteString(capNames(r.Names))
	b.WriteByte(']')
	if r.Type == wire.Error {
		b.WriteString(": ")
		b.WriteString(r.Error)
	}
	return b.String()
}

// capNames joins the first logNames names with spaces and says how many
// more there are.
func capNames(names []string) string {
	var b strings.Builder
	for i, n := range names {
		if i == logNames {
			b.WriteString(" +")
			b.WriteString(strconv.Itoa(len(names) - logNames))
			b.WriteString(" more")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(n)
	}
	return b.String()
}

// hexWords formats an agreement vector: its first logWords words in hex.
func hexWords(w []uint64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, x := range w {
		if i == logWords {
			b.WriteString(" +")
			b.WriteString(strconv.Itoa(len(w) - logWords))
			b.WriteString(" more")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("0x")
		b.WriteString(strconv.FormatUint(x, 16))
	}
	b.WriteByte(']')
	return b.String()
}

// loopLog is a loop's logger, with what the loop logs about its cycles.
type loopLog struct{ zerolog.Logger }

// traceStart logs, at trace, a cycle that popped requests, with this
// rank's agreement vector before the AND.
func (lg *loopLog) traceStart(requests int, words []uint64) {
	lg.Trace().Int("requests", requests).Str("words", hexWords(words)).Msg("cycle start")
}

// traceAgreed logs, at trace, what the agreement decided: the ANDed
// vector, the cached responses every rank performs, the requests sent back
// to the queue, whether the ranks negotiate.
func (lg *loopLog) traceAgreed(requests int, words []uint64, d *cycle.Decision) {
	lg.Trace().Int("requests", requests).Str("agreed", hexWords(words)).
		Int("cached", len(d.Responses)).Int("back", len(d.Back)).Int("uncached", len(d.Uncached)).
		Bool("negotiate", d.Negotiate).Bool("shutdown", d.Shutdown).Msg("cycle agreed")
}

// logNegotiated logs, at debug, one negotiation's result: how many
// requests this rank sent, the responses (every error, and the first
// logResponses others), and the evictions it caused in the response cache.
// A negotiation that sent and decided nothing (every cycle while some rank
// waits for a peer to submit its requests) is logged at trace only.
func (lg *loopLog) logNegotiated(sent int, list *wire.ResponseList, c *cache.Cache) {
	lvl := zerolog.DebugLevel
	if sent == 0 && len(list.Responses) == 0 && !list.Shutdown {
		lvl = zerolog.TraceLevel
	}
	errs := 0
	var descs []string
	for i := range list.Responses {
		r := &list.Responses[i]
		if r.Type == wire.Error {
			errs++
			descs = append(descs, describe(r))
		} else if len(descs)-errs < logResponses {
			descs = append(descs, describe(r))
		}
	}
	if n := len(list.Responses) - len(descs); n > 0 {
		descs = append(descs, "+"+strconv.Itoa(n)+" more")
	}
	lg.WithLevel(lvl).Int("sent", sent).Int("responses", len(list.Responses)).Int("errors", errs).
		Bool("shutdown", list.Shutdown).Strs("list", descs).Int("cache_entries", c.Len()).Msg("negotiated")
	if n := c.Evictions(); n > 0 {
		lg.Debug().Int("evicted", n).Int("cache_entries", c.Len()).Int("capacity", c.Capacity()).
			Msg("response cache full: least recently used responses evicted")
	}
}

// logInvalidated logs, at debug, the cache entries that some rank
// submitted with changed parameters (inv, the ORed invalid-bit vector):
// every rank erases them, and their names go through negotiation again.
func (lg *loopLog) logInvalidated(inv []uint64, c *cache.Cache) {
	var names []string
	for wi, w := range inv {
		for b := 0; w != 0; b, w = b+1, w>>1 {
			if bit := wi*64 + b; w&1 != 0 && c.Has(bit) {
				names = append(names, c.Peek(bit).Names[0])
			}
		}
	}
	lg.Debug().Int("entries", len(names)).Str("names", capNames(names)).
		Msg("response cache: parameters changed, entries erased on every rank")
}

// logPlan logs, at debug, the fusion plan of a cycle with more than one
// response: how many responses became how many collectives, how many of
// those are fused and with how many bytes, and how many allreduces run
// alone for being larger than the largest fused tensor.
func (lg *loopLog) logPlan(in, out []wire.Response, maxFused, threshold int64) {
	fused, tensors, alone := 0, 0, 0
	var bytes, fusedBytes int64
	for i := range out {
		r := &out[i]
		if !fusion.Fusible(r.Type) {
			continue
		}
		b := fusion.Bytes(r)
		bytes += b
		switch {
		case len(r.Names) > 1:
			fused++
			tensors += len(r.Names)
			fusedBytes += b
		case maxFused > 0 && b > maxFused:
			alone++
		}
	}
	lg.Debug().Int("responses", len(in)).Int("collectives", len(out)).Int("fused", fused).
		Int("fused_tensors", tensors).Int64("fused_bytes", fusedBytes).Int("too_large", alone).
		Int64("allreduce_bytes", bytes).Int64("threshold", threshold).Msg("fusion plan")
}

// tracePerform logs, at trace, each response as it is performed.
func (lg *loopLog) tracePerform(resp *wire.Response) {
	lg.Trace().Str("response", describe(resp)).Int("tensors", len(resp.Names)).Msg("performing")
}
