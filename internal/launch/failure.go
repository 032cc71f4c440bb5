package launch

import (
	"regexp"
	"strconv"
	"strings"
)

// failureScanner reads mpirun's stderr, line by line, for the report of the
// first failing process (Open MPI and Hydra word it differently).
type failureScanner struct {
	rank   int
	code   int
	signal int
	host   string
	pid    int
	seen   bool
	// aborted: mpirun said it is aborting the job ("Per user-direction, the
	// job has been aborted."), before it names the rank, which it may never
	// get to where a node cannot be reached.
	aborted bool
	// words holds, per rank, the most telling line of its own stderr so
	// far (see lastWords), to show with the failing rank's report.
	words map[int]lastWords
}

// lastWords is a rank's most telling stderr line and how telling it is: a
// Go panic or fatal error first (its first line: the rest is the trace),
// then the last line that reads like an error (a runtime's ERR log line,
// "error", "failed"), then the last line at all.
type lastWords struct {
	text  string
	level int
}

// maxWords bounds the length of a line kept as a rank's last words.
const maxWords = 400

func wordsLevel(s string) int {
	low := strings.ToLower(s)
	switch {
	case strings.HasPrefix(s, "panic:") || strings.HasPrefix(s, "fatal error:"):
		return 3
	case strings.Contains(s, " ERR ") || strings.Contains(s, "hvd:") ||
		strings.Contains(low, "error") || strings.Contains(low, "fail"):
		return 2
	}
	return 1
}

// shutDownText starts the runtime's (Horovod's) long shutdown message; a
// rank's last words keep its first sentence and the cause that follows it.
const shutDownText = "Horovod has been shut down."

// compactShutdown shortens the runtime's shutdown message in line to its
// first sentence and its cause.
func compactShutdown(line string) string {
	i := strings.Index(line, shutDownText)
	if i < 0 {
		return line
	}
	j := strings.Index(line[i:], " Cause: ")
	if j < 0 {
		return line
	}
	return line[:i+len(shutDownText)] + line[i+j:]
}

// note keeps line as rank's last words when it tells at least as much as
// what is kept (a panic's first line is never replaced).
func (f *failureScanner) note(rank int, line string) {
	line = compactShutdown(strings.TrimSpace(line))
	if line == "" {
		return
	}
	if len(line) > maxWords {
		line = line[:maxWords] + "..."
	}
	lv := wordsLevel(line)
	old, ok := f.words[rank]
	if ok && (old.level > lv || old.level == 3) {
		return
	}
	if f.words == nil {
		f.words = make(map[int]lastWords)
	}
	f.words[rank] = lastWords{text: line, level: lv}
}

var (
	// Open MPI: "  Process name: [[8718,1],1]" then "  Exit code:    3".
	ompiName = regexp.MustCompile(`Process name:\s*\[\[\d+,\d+\],(\d+)\]`)
	ompiCode = regexp.MustCompile(`^\s*Exit code:\s*(-?\d+)`)
	// Open MPI: "mpirun noticed that process rank 1 with PID 0 on node vm
	// exited on signal 9 (Killed)." (Open MPI 4.1 writes PID 0: unknown.)
	ompiSignal = regexp.MustCompile(`process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)`)
	// Open MPI: "mpirun has exited due to process rank 1 with PID 123 on node x exiting improperly."
	ompiImproper = regexp.MustCompile(`exited due to process rank (\d+) with PID`)
	// Hydra: "=   RANK 1 PID 4242 RUNNING AT host" then "=   EXIT CODE: 3"
	// or "=   KILLED BY SIGNAL: 9 (Killed)".
	hydraRank   = regexp.MustCompile(`RANK (\d+) PID (\d+) RUNNING AT (\S+)`)
	hydraCode   = regexp.MustCompile(`EXIT CODE: (\d+)`)
	hydraSignal = regexp.MustCompile(`KILLED BY SIGNAL: (\d+)`)
	// Open MPI with --tag-output: "[1,2]<stderr>:text", a line of rank 2's
	// own stderr.
	ompiTagged = regexp.MustCompile(`^\[\d+,(\d+)\]<stderr>:(.*)$`)
)

// ompiAborted is Open MPI's line when a rank exited non-zero and mpirun
// aborts the rest of the job.
const ompiAborted = "the job has been aborted"

func newFailureScanner() *failureScanner { return &failureScanner{rank: -1, code: -1} }

// Line feeds one line of mpirun's stderr. The first rank reported wins.
func (f *failureScanner) Line(s string) {
	if m := ompiTagged.FindStringSubmatch(s); m != nil {
		r, _ := strconv.Atoi(m[1])
		f.note(r, m[2])
		return
	}
	if strings.Contains(s, ompiAborted) {
		f.aborted = true
		return
	}
	if m := ompiName.FindStringSubmatch(s); m != nil && f.rank < 0 {
		f.rank, _ = strconv.Atoi(m[1])
		f.seen = true
		return
	}
	if m := ompiCode.FindStringSubmatch(s); m != nil && f.seen && f.code < 0 {
		f.code, _ = strconv.Atoi(m[1])
		return
	}
	if m := ompiSignal.FindStringSubmatch(s); m != nil && f.rank < 0 {
		f.rank, _ = strconv.Atoi(m[1])
		f.pid, _ = strconv.Atoi(m[2])
		f.host = m[3]
		f.signal, _ = strconv.Atoi(m[4])
		f.seen = true
		return
	}
	if m := ompiImproper.FindStringSubmatch(s); m != nil && f.rank < 0 {
		f.rank, _ = strconv.Atoi(m[1])
		f.seen = true
		return
	}
	if m := hydraRank.FindStringSubmatch(s); m != nil && f.rank < 0 {
		f.rank, _ = strconv.Atoi(m[1])
		f.pid, _ = strconv.Atoi(m[2])
		f.host = m[3]
		f.seen = true
		return
	}
	if m := hydraCode.FindStringSubmatch(s); m != nil && f.code < 0 {
		f.code, _ = strconv.Atoi(m[1])
		return
	}
	if m := hydraSignal.FindStringSubmatch(s); m != nil && f.signal == 0 && f.code < 0 {
		f.signal, _ = strconv.Atoi(m[1])
	}
}

// result turns what was seen, and mpirun's own exit status, into the
// error the launcher reports.
func (f *failureScanner) result(mpirunStatus int) *WorkerError {
	e := &WorkerError{Rank: f.rank, Code: f.code, Signal: f.signal, Host: f.host, PID: f.pid}
	if f.rank >= 0 {
		e.LastWords = f.words[f.rank].text
	}
	if e.Code < 0 {
		e.Code = mpirunStatus
	}
	return e
}

// lineTap passes everything written to w and hands each complete line to
// onLine.
type lineTap struct {
	w      interface{ Write([]byte) (int, error) }
	onLine func(string)
	buf    []byte
}

func (t *lineTap) Write(p []byte) (int, error) {
	n, err := t.w.Write(p)
	t.buf = append(t.buf, p...)
	for {
		i := indexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		t.onLine(string(t.buf[:i]))
		t.buf = t.buf[i+1:]
	}
	if len(t.buf) > 1<<16 { // a line this long is not mpirun's report
		t.buf = t.buf[:0]
	}
	return n, err
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}
