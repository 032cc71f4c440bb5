package elastic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/gohorovod/gohorovod/internal/job/rendezvous"
)

// DefaultElasticTimeout is horovodrun's --elastic-timeout
// (HOROVOD_ELASTIC_TIMEOUT): 600 seconds.
const DefaultElasticTimeout = 600 * time.Second

// Config is the elastic job's shape: horovodrun's elastic flags.
type Config struct {
	// NP is -np: the slots needed to start.
	NP int
	// MinNP is --min-np: the slots needed to go on after a reset; 0 means
	// NP.
	MinNP int
	// MaxNP is --max-np: the most slots assigned; 0 means no cap.
	MaxNP int
	// ElasticTimeout is how long to wait for enough slots, and how long
	// discovery may keep failing; 0 means DefaultElasticTimeout.
	ElasticTimeout time.Duration
	// ResetLimit is --reset-limit: the job ends when it would reset for the
	// (ResetLimit+1)-th time. 0 or less means no limit (horovodrun's
	// default).
	ResetLimit int
	// CooldownMin and CooldownMax are --blacklist-cooldown-range; both zero
	// (the default) blacklist a failed host for good.
	CooldownMin, CooldownMax time.Duration
	// Rand returns U, uniform in [0, 1), for the cooldown; nil means
	// math/rand/v2's Float64.
	Rand func() float64
	// DiscoveryScript names the discovery script in error messages.
	DiscoveryScript string
}

// Slot is one worker's place: a host and a local rank on it.
type Slot struct {
	Host  string
	Local int
}

// String implements fmt.Stringer in Horovod's "host[local_rank]" form.
func (s Slot) String() string { return s.Host + "[" + strconv.Itoa(s.Local) + "]" }

// SlotInfo is a slot's place in a round: what a worker learns when it asks
// for its rank and size.
type SlotInfo struct {
	Slot
	Rank, Size           int
	LocalSize            int
	CrossRank, CrossSize int
}

// Round is one rendezvous round: its number (1 for the job's start) and its
// members in rank order.
type Round struct {
	ID    int
	Slots []SlotInfo
}

// Update says how the hosts changed, with Horovod's HostUpdateResult values.
// A worker that is told Removed alone may skip the state sync at its reset.
type Update uint8

// The host updates.
const (
	NoUpdate Update = 0
	Removed  Update = 1
	Added    Update = 2
	Mixed    Update = Removed | Added
)

// String implements fmt.Stringer.
func (u Update) String() string {
	switch u {
	case NoUpdate:
		return "no_update"
	case Removed:
		return "removed"
	case Added:
		return "added"
	case Mixed:
		return "mixed"
	}
	return "Update(" + strconv.Itoa(int(u)) + ")"
}

// Event is an input to Driver.Step: Discovered, DiscoveryFailed, Ready,
// Succeeded, Failed or Tick.
type Event interface{ event() }

// Discovered is a successful run of the discovery script (or, with fixed
// hosts, the -H list given once).
type Discovered struct{ Hosts []Host }

// DiscoveryFailed is a failed run of the discovery script.
type DiscoveryFailed struct {
	ExitCode int
	// Err is further detail, or nil.
	Err error
}

// Ready is a running worker that has reset and asks to join the next round
// (Horovod's record_ready). A worker's first rendezvous, right after a
// Start, is not reported: its rank comes from the round that started it.
type Ready struct{ Slot Slot }

// Succeeded is a worker process that exited with status 0.
type Succeeded struct{ Slot Slot }

// Failed is a worker process that exited with a non-zero status (or was
// killed).
type Failed struct {
	Slot   Slot
	Status int
}

// Tick is the passing of time: deadlines and cooldowns are checked.
type Tick struct{}

func (Discovered) event()      {}
func (DiscoveryFailed) event() {}
func (Ready) event()           {}
func (Succeeded) event()       {}
func (Failed) event()          {}
func (Tick) event()            {}

// Decision is what the launcher must do after a Step. The zero Decision
// asks for nothing.
type Decision struct {
	// Round, when not nil, begins a rendezvous round: workers that asked
	// (Ready) and workers in Start get their SlotInfo from it; a worker that
	// asks and is not in it is told it was removed.
	Round *Round
	// Start lists slots that need a new worker process.
	Start []Slot
	// Stop lists workers that are no longer part of the job.
	Stop []Slot
	// Notify, when not NoUpdate, is a host update to send to the
	// coordinator (rank 0 of the current round).
	Notify Update
	// Done says the job has ended: successfully when Err is nil.
	Done bool
	Err  error
}

type phase uint8

const (
	starting phase = iota // waiting for NP slots
	running               // a round is under way
	waiting               // reset: waiting for MinNP slots
	done
)

type record uint8

const (
	recReady record = iota + 1
	recSuccess
	recFailure
)

type blacklistEntry struct {
	count int       // times blacklisted
	until time.Time // end of the cooldown; zero means for good
}

// Driver is the elastic driver's state. Create it with New; it is not safe
// for concurrent use (one loop owns it).
type Driver struct {
	cfg Config

	phase    phase
	deadline time.Time
	err      error

	discovered    []Host
	haveDiscovery bool
	failingSince  time.Time
	failing       bool

	order     []string // available hosts in assignment order
	blacklist map[string]*blacklistEntry

	assign   []SlotInfo
	round    int
	resets   int
	running  map[Slot]bool
	recorded map[Slot]record
	status   map[Slot]int
	notified bool
}

// New checks cfg, fills its defaults, and returns a driver that waits for
// NP slots from now on.
func New(cfg Config, now time.Time) (*Driver, error) {
	if cfg.NP < 1 {
		return nil, fmt.Errorf("elastic: -np must be at least 1, got %d", cfg.NP)
	}
	if cfg.MinNP == 0 {
		cfg.MinNP = cfg.NP
	}
	if cfg.MinNP < 1 || cfg.MinNP > cfg.NP {
		return nil, fmt.Errorf("elastic: --min-np %d must be between 1 and -np %d", cfg.MinNP, cfg.NP)
	}
	if cfg.MaxNP != 0 && cfg.MaxNP < cfg.NP {
		return nil, fmt.Errorf("elastic: --max-np %d must be at least -np %d", cfg.MaxNP, cfg.NP)
	}
	if cfg.ElasticTimeout < 0 {
		return nil, fmt.Errorf("elastic: --elastic-timeout must not be negative, got %s", cfg.ElasticTimeout)
	}
	if cfg.ElasticTimeout == 0 {
		cfg.ElasticTimeout = DefaultElasticTimeout
	}
	if cfg.CooldownMin != 0 || cfg.CooldownMax != 0 {
		if cfg.CooldownMin <= 0 || cfg.CooldownMax < cfg.CooldownMin {
			return nil, fmt.Errorf("elastic: --blacklist-cooldown-range %s %s: want 0 < MIN <= MAX", cfg.CooldownMin, cfg.CooldownMax)
		}
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	return &Driver{
		cfg:       cfg,
		deadline:  now.Add(cfg.ElasticTimeout),
		blacklist: map[string]*blacklistEntry{},
		running:   map[Slot]bool{},
		recorded:  map[Slot]record{},
		status:    map[Slot]int{},
	}, nil
}

// Cooldown is the blacklist cooldown of a host blacklisted count times
// before: clamp(min*2^count + u*min, min, max), u in [0, 1).
func Cooldown(min, max time.Duration, count int, u float64) time.Duration {
	if count < 0 {
		count = 0
	}
	if count >= 63 || min > max>>count {
		return max
	}
	d := min<<count + time.Duration(u*float64(min))
	return clamp(d, min, max)
}

func clamp(d, lo, hi time.Duration) time.Duration {
	if d < lo {
		return lo
	}
	if d > hi || d < 0 { // d < 0: overflow
		return hi
	}
	return d
}

// Assignment returns the current round's members in rank order.
func (d *Driver) Assignment() []SlotInfo { return slices.Clone(d.assign) }

// Round returns the current round's number; 0 before the job starts.
func (d *Driver) Round() int { return d.round }

// Resets returns how many times the job has reset.
func (d *Driver) Resets() int { return d.resets }

// Blacklisted reports whether host is blacklisted at now.
func (d *Driver) Blacklisted(host string, now time.Time) bool {
	b := d.blacklist[host]
	return b != nil && (b.until.IsZero() || now.Before(b.until))
}

// Done reports whether the job has ended, and its error (nil for success).
func (d *Driver) Done() (bool, error) { return d.phase == done, d.err }

// Step applies one event that happened at now and returns what to do. After
// the job has ended every Step returns Done and the same error.
func (d *Driver) Step(now time.Time, ev Event) Decision {
	var dec Decision
	if d.phase == done {
		return Decision{Done: true, Err: d.err}
	}
	switch e := ev.(type) {
	case Discovered:
		d.discovered = slices.Clone(e.Hosts)
		d.haveDiscovery = true
		d.failing = false
	case DiscoveryFailed:
		derr := &DiscoveryError{Script: d.cfg.DiscoveryScript, ExitCode: e.ExitCode, Err: e.Err}
		if !d.haveDiscovery {
			d.finish(&dec, derr)
			return dec
		}
		if !d.failing {
			d.failing, d.failingSince = true, now
		}
		if now.Sub(d.failingSince) >= d.cfg.ElasticTimeout {
			d.finish(&dec, &DiscoveryTimeoutError{Waited: d.cfg.ElasticTimeout, Last: derr})
			return dec
		}
	case Ready:
		d.report(now, &dec, e.Slot, recReady, 0)
	case Succeeded:
		d.report(now, &dec, e.Slot, recSuccess, 0)
	case Failed:
		d.report(now, &dec, e.Slot, recFailure, e.Status)
	case Tick:
	default:
		panic(fmt.Sprintf("elastic: unknown event %T", ev))
	}
	d.advance(now, &dec)
	return dec
}

// report records a worker's report.
func (d *Driver) report(now time.Time, dec *Decision, s Slot, r record, status int) {
	if r != recReady {
		delete(d.running, s)
	}
	if !d.assigned(s) {
		return // a removed worker, or one of no round
	}
	switch d.phase {
	case running:
		d.recorded[s] = r
		d.status[s] = status
	case waiting:
		// The round has ended; its workers wait for the next one.
		switch r {
		case recSuccess:
			d.finish(dec, nil)
		case recFailure:
			d.blacklistHost(now, s.Host)
		}
	}
}

func (d *Driver) assigned(s Slot) bool {
	return slices.ContainsFunc(d.assign, func(i SlotInfo) bool { return i.Slot == s })
}

// advance moves the driver on after an event.
func (d *Driver) advance(now time.Time, dec *Decision) {
	switch d.phase {
	case starting:
		if !d.activate(now, dec, d.cfg.NP) && !now.Before(d.deadline) {
			d.finish(dec, &TimeoutError{Waited: d.cfg.ElasticTimeout, Need: d.cfg.NP, Flag: "-np", Have: count(d.available(now))})
		}
	case waiting:
		if !d.activate(now, dec, d.cfg.MinNP) && !now.Before(d.deadline) {
			d.finish(dec, &TimeoutError{Waited: d.cfg.ElasticTimeout, Need: d.cfg.MinNP, Flag: "--min-np", Have: count(d.available(now))})
		}
	case running:
		if len(d.recorded) == len(d.assign) {
			d.endRound(now, dec)
			return
		}
		if d.notified || len(d.recorded) > 0 {
			return // a reset is already under way; the next round sees the latest hosts
		}
		var next []SlotInfo
		if hosts := d.available(now); count(hosts) >= d.cfg.MinNP {
			next = d.plan(hosts)
		}
		if u := diff(d.assign, next); u != NoUpdate {
			dec.Notify = u
			d.notified = true
		}
	}
}

// endRound is Horovod's action when every slot of the round has reported.
func (d *Driver) endRound(now time.Time, dec *Decision) {
	var failures []Failure
	success := false
	for _, i := range d.assign {
		switch d.recorded[i.Slot] {
		case recSuccess:
			success = true
		case recFailure:
			failures = append(failures, Failure{Slot: i.Slot, Status: d.status[i.Slot]})
		}
	}
	if success {
		d.finish(dec, nil)
		return
	}
	if len(failures) == len(d.assign) {
		d.finish(dec, &WorkersFailedError{Failures: failures})
		return
	}
	for _, f := range failures {
		d.blacklistHost(now, f.Slot.Host)
	}
	var hosts []string
	all := true
	for _, i := range d.assign {
		if i.Local == 0 {
			hosts = append(hosts, i.Host)
			all = all && d.Blacklisted(i.Host, now)
		}
	}
	if all {
		d.finish(dec, &BlacklistedError{Hosts: hosts})
		return
	}
	if d.cfg.ResetLimit > 0 && d.resets >= d.cfg.ResetLimit {
		d.finish(dec, &ResetLimitError{Limit: d.cfg.ResetLimit})
		return
	}
	d.resets++
	d.phase = waiting
	d.deadline = now.Add(d.cfg.ElasticTimeout)
	d.activate(now, dec, d.cfg.MinNP)
}

func (d *Driver) blacklistHost(now time.Time, host string) {
	b := d.blacklist[host]
	if b == nil {
		b = &blacklistEntry{}
		d.blacklist[host] = b
	}
	if d.cfg.CooldownMin > 0 {
		b.until = now.Add(Cooldown(d.cfg.CooldownMin, d.cfg.CooldownMax, b.count, d.cfg.Rand()))
	}
	b.count++
}

// available returns the discovered hosts that are not blacklisted at now,
// in assignment order, and updates that order: hosts keep their relative
// order, new ones are appended in discovery order.
func (d *Driver) available(now time.Time) []Host {
	slots := map[string]int{}
	var fresh []string
	for _, h := range d.discovered {
		if d.Blacklisted(h.Name, now) {
			continue
		}
		slots[h.Name] = h.Slots
		if !slices.Contains(d.order, h.Name) {
			fresh = append(fresh, h.Name)
		}
	}
	d.order = slices.DeleteFunc(d.order, func(n string) bool { _, ok := slots[n]; return !ok })
	d.order = append(d.order, fresh...)
	hosts := make([]Host, len(d.order))
	for i, n := range d.order {
		hosts[i] = Host{Name: n, Slots: slots[n]}
	}
	return hosts
}

func count(hosts []Host) int {
	n := 0
	for _, h := range hosts {
		n += h.Slots
	}
	return n
}

// plan assigns ranks host by host, up to MaxNP slots, with horovodrun's
// placement rules (rendezvous.Assign, which the launcher and the rendezvous
// server share).
func (d *Driver) plan(hosts []Host) []SlotInfo {
	var expect []rendezvous.Slot
	for _, h := range hosts {
		for l := 0; l < h.Slots && (d.cfg.MaxNP <= 0 || len(expect) < d.cfg.MaxNP); l++ {
			expect = append(expect, rendezvous.Slot{Host: h.Name, LocalRank: l})
		}
	}
	if len(expect) == 0 {
		return nil
	}
	as, err := rendezvous.Assign(expect)
	if err != nil {
		panic("elastic: " + err.Error()) // hosts are distinct (ParseDiscovery) and listed whole
	}
	out := make([]SlotInfo, len(as))
	for i, a := range as {
		out[i] = SlotInfo{Slot: Slot{Host: expect[i].Host, Local: a.LocalRank}, Rank: a.Rank, Size: a.Size,
			LocalSize: a.LocalSize, CrossRank: a.CrossRank, CrossSize: a.CrossSize}
	}
	return out
}

// diff says how next differs from cur.
func diff(cur, next []SlotInfo) Update {
	in := func(s Slot, set []SlotInfo) bool {
		return slices.ContainsFunc(set, func(i SlotInfo) bool { return i.Slot == s })
	}
	var u Update
	for _, i := range next {
		if !in(i.Slot, cur) {
			u |= Added
		}
	}
	for _, i := range cur {
		if !in(i.Slot, next) {
			u |= Removed
		}
	}
	return u
}

// activate begins a round if need slots are available.
func (d *Driver) activate(now time.Time, dec *Decision, need int) bool {
	hosts := d.available(now)
	if count(hosts) < need {
		return false
	}
	next := d.plan(hosts)
	if len(d.assign) > 0 && !slices.ContainsFunc(next, func(n SlotInfo) bool {
		return slices.ContainsFunc(d.assign, func(c SlotInfo) bool { return c.Host == n.Host })
	}) {
		d.finish(dec, ErrNoPreviousHosts)
		return true
	}
	for _, i := range next {
		if !d.running[i.Slot] {
			dec.Start = append(dec.Start, i.Slot)
			d.running[i.Slot] = true
		}
	}
	for _, s := range d.runningSlots() {
		if !slices.ContainsFunc(next, func(i SlotInfo) bool { return i.Slot == s }) {
			dec.Stop = append(dec.Stop, s)
			delete(d.running, s)
		}
	}
	d.assign = next
	d.round++
	dec.Round = &Round{ID: d.round, Slots: slices.Clone(next)}
	clear(d.recorded)
	clear(d.status)
	d.notified = false
	d.phase = running
	return true
}

// runningSlots returns the running workers: the assigned ones in rank
// order, then any others by host and local rank.
func (d *Driver) runningSlots() []Slot {
	var out, rest []Slot
	for _, i := range d.assign {
		if d.running[i.Slot] {
			out = append(out, i.Slot)
		}
	}
	for s := range d.running {
		if !d.assigned(s) {
			rest = append(rest, s)
		}
	}
	slices.SortFunc(rest, func(a, b Slot) int {
		if a.Host != b.Host {
			if a.Host < b.Host {
				return -1
			}
			return 1
		}
		return a.Local - b.Local
	})
	return append(out, rest...)
}

// finish ends the job and stops every running worker.
func (d *Driver) finish(dec *Decision, err error) {
	dec.Stop = append(dec.Stop, d.runningSlots()...)
	clear(d.running)
	dec.Done, dec.Err = true, err
	d.phase, d.err = done, err
}
