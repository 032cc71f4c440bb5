package jobload

import (
	"runtime"
	"sync"
	"time"
)

// Meter samples this process's memory and goroutines while a server
// serves, and keeps the peaks.
type Meter struct {
	base  runtime.MemStats
	baseG int

	mu    sync.Mutex
	peak  Usage
	stop  chan struct{}
	done  chan struct{}
	every time.Duration
}

// Usage is what a server holds above the baseline taken by StartMeter:
// heap in use, memory from the OS, goroutines.
type Usage struct {
	HeapInuse, Sys uint64
	Goroutines     int
}

// StartMeter takes the baseline (after a collection) and samples every
// interval until Stop.
func StartMeter(every time.Duration) *Meter {
	m := &Meter{stop: make(chan struct{}), done: make(chan struct{}), every: every}
	runtime.GC()
	runtime.ReadMemStats(&m.base)
	m.baseG = runtime.NumGoroutine()
	go m.run()
	return m
}

func (m *Meter) run() {
	defer close(m.done)
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		m.sample()
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
	}
}

// Sample records the usage now, besides the periodic samples (call it at
// the moment of interest, e.g. once every client has joined).
func (m *Meter) Sample() { m.sample() }

func (m *Meter) sample() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	g := runtime.NumGoroutine() - m.baseG
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peak.HeapInuse = max(m.peak.HeapInuse, sub(s.HeapInuse, m.base.HeapInuse))
	m.peak.Sys = max(m.peak.Sys, sub(s.Sys, m.base.Sys))
	m.peak.Goroutines = max(m.peak.Goroutines, g)
}

func sub(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// Stop ends the sampling and returns the peaks above the baseline.
func (m *Meter) Stop() Usage {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}
