package elastic

import (
	"context"
	"sync"
)

// hub is an in-memory Broadcaster for n goroutine ranks: the k-th call of
// every rank is one broadcast.
type hub struct {
	n     int
	mu    sync.Mutex
	slots map[int]chan []byte
}

func newHub(n int) *hub { return &hub{n: n, slots: map[int]chan []byte{}} }

func (h *hub) slot(k int) chan []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.slots[k]
	if !ok {
		c = make(chan []byte, h.n)
		h.slots[k] = c
	}
	return c
}

// rank returns the Broadcaster of one rank.
func (h *hub) rank(r int) *hubRank { return &hubRank{h: h, r: r} }

type hubRank struct {
	h     *hub
	r     int
	calls int
}

func (hr *hubRank) BroadcastBytes(ctx context.Context, b []byte, root int) ([]byte, error) {
	c := hr.h.slot(hr.calls)
	hr.calls++
	if hr.r == root {
		for range hr.h.n - 1 {
			c <- append([]byte(nil), b...)
		}
		return append([]byte(nil), b...), nil
	}
	select {
	case got := <-c:
		return got, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
