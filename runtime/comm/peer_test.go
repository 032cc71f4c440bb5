package comm

import (
	"errors"
	"fmt"
	"testing"
)

func TestPeerErrorText(t *testing.T) {
	tests := []struct {
		err  *PeerError
		want string
	}{
		{&PeerError{Rank: 1, Cause: "out of memory"}, "comm: rank 1 failed: out of memory"},
		{&PeerError{Rank: 3}, "comm: rank 3 failed"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%#v: got %q, want %q", tt.err, got, tt.want)
		}
		if !errors.Is(tt.err, ErrClosed) {
			t.Errorf("%#v does not match ErrClosed", tt.err)
		}
		wrapped := fmt.Errorf("allreduce: %w", tt.err)
		var pe *PeerError
		if !errors.As(wrapped, &pe) || pe != tt.err || !errors.Is(wrapped, ErrClosed) {
			t.Errorf("a wrapped %#v is not found by errors.As, or does not match ErrClosed", tt.err)
		}
	}
}
