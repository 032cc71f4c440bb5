package cuda

import (
	"fmt"
	"sort"
	"sync"
	"unsafe"
)

// arena hands out Go-managed byte buffers by address, as a device
// allocator hands out device pointers. The arena keeps every live buffer
// referenced, so the addresses stay valid (Go's heap does not move
// objects), and resolves an address range back to the slice by lookup,
// never by turning an integer into a pointer.
type arena struct {
	what  string // "device 0 memory", for messages
	align int
	limit int // bytes; 0 is unlimited

	mu     sync.Mutex
	allocs []region // sorted by base
	live   int
	peak   int
}

type region struct {
	base uintptr
	buf  []byte // the aligned window handed out; it keeps the whole allocation alive
}

// alloc returns the address of n new zeroed bytes (n > 0).
func (a *arena) alloc(n int) (uintptr, []byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.limit > 0 && a.live+n > a.limit {
		return 0, nil, fmt.Errorf("%s: %d bytes requested, %d of %d in use", a.what, n, a.live, a.limit)
	}
	raw := make([]byte, n+a.align)
	off := 0
	if a.align > 1 {
		if m := int(uintptr(unsafe.Pointer(&raw[0])) % uintptr(a.align)); m != 0 {
			off = a.align - m
		}
	}
	buf := raw[off : off+n : off+n]
	base := uintptr(unsafe.Pointer(&buf[0]))
	i := sort.Search(len(a.allocs), func(i int) bool { return a.allocs[i].base > base })
	a.allocs = append(a.allocs, region{})
	copy(a.allocs[i+1:], a.allocs[i:])
	a.allocs[i] = region{base: base, buf: buf}
	a.live += n
	if a.live > a.peak {
		a.peak = a.live
	}
	return base, buf, nil
}

// free releases the allocation that starts at p.
func (a *arena) free(p uintptr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.allocs), func(i int) bool { return a.allocs[i].base >= p })
	if i == len(a.allocs) || a.allocs[i].base != p {
		return fmt.Errorf("%s: free of %#x, which is not the start of a live allocation", a.what, p)
	}
	a.live -= len(a.allocs[i].buf)
	a.allocs = append(a.allocs[:i], a.allocs[i+1:]...)
	return nil
}

// slice returns the n bytes at p, which must lie within one live
// allocation.
func (a *arena) slice(p uintptr, n int) ([]byte, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i := sort.Search(len(a.allocs), func(i int) bool { return a.allocs[i].base > p }) - 1
	if i < 0 || p >= a.allocs[i].base+uintptr(len(a.allocs[i].buf)) {
		return nil, fmt.Errorf("%s: address %#x is not in a live allocation", a.what, p)
	}
	r := a.allocs[i]
	off := int(p - r.base)
	if n < 0 || off+n > len(r.buf) {
		return nil, fmt.Errorf("%s: %d bytes at %#x run past the end of the %d-byte allocation at %#x", a.what, n, p, len(r.buf), r.base)
	}
	return r.buf[off : off+n : off+n], nil
}

// stats returns the number of live allocations, their bytes and the peak.
func (a *arena) stats() (count, live, peak int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.allocs), a.live, a.peak
}

// reset drops every allocation.
func (a *arena) reset() {
	a.mu.Lock()
	a.allocs, a.live = nil, 0
	a.mu.Unlock()
}
