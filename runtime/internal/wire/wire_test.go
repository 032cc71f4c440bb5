package wire

import (
	"errors"
	"reflect"
	"testing"

	"github.com/gohorovod/gohorovod/tensor"
)

func sampleRequests() RequestList {
	return RequestList{Shutdown: true, Requests: []Request{
		{Rank: 3, Type: Allreduce, DType: tensor.Float32, Name: "grad.conv1", Root: 0, Device: CPU,
			Shape: []int64{64, 3, 7, 7}, Prescale: 0.5, Postscale: 0.25, Op: Average},
		{Rank: 3, Type: Broadcast, DType: tensor.Int64, Name: "", Root: 2, Device: 1, Prescale: 1, Postscale: 1, Op: Sum},
		{Rank: 3, Type: Join, Name: "join.noname", Device: CPU, Shape: []int64{}},
	}}
}

func sampleResponses() ResponseList {
	return ResponseList{Responses: []Response{
		{Type: ResponseType(Allreduce), Names: []string{"a", "b"}, Devices: []int32{-1, -1}, Sizes: []int64{10, 20},
			Shapes: [][]int64{{10}, {4, 5}}, DType: tensor.Float16, Prescale: 1, Postscale: 0.5, Op: Sum},
		{Type: Error, Names: []string{"x"}, Error: "Mismatched data types: boom"},
		{Type: ResponseType(Join), LastJoinedRank: 7},
	}}
}

func TestRequestListRoundTrip(t *testing.T) {
	for _, l := range []RequestList{{}, {Shutdown: true}, sampleRequests()} {
		b := AppendRequestList(nil, &l)
		got, err := DecodeRequestList(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		// Empty shapes decode as nil.
		for i := range l.Requests {
			if len(l.Requests[i].Shape) == 0 {
				l.Requests[i].Shape = nil
			}
		}
		if !reflect.DeepEqual(got, l) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, l)
		}
	}
}

func TestResponseListRoundTrip(t *testing.T) {
	for _, l := range []ResponseList{{}, {Shutdown: true}, sampleResponses()} {
		b := AppendResponseList(nil, &l)
		got, err := DecodeResponseList(b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !reflect.DeepEqual(got, l) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, l)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	full := AppendRequestList(nil, &RequestList{Requests: sampleRequests().Requests})
	resp := sampleResponses()
	fullResp := AppendResponseList(nil, &resp)
	tests := []struct {
		name string
		fn   func() error
		want error
	}{
		{"empty request list", func() error { _, err := DecodeRequestList(nil); return err }, ErrTruncated},
		{"truncated request", func() error { _, err := DecodeRequestList(full[:len(full)-3]); return err }, ErrTruncated},
		{"trailing bytes", func() error { _, err := DecodeRequestList(append(full[:len(full):len(full)], 0)); return err }, nil},
		{"huge count", func() error { _, err := DecodeRequestList([]byte{0, 0xff, 0xff, 0xff, 0xff, 0x0f}); return err }, ErrTruncated},
		{"bad bool", func() error { _, err := DecodeRequestList([]byte{2, 0}); return err }, nil},
		{"truncated response", func() error { _, err := DecodeResponseList(fullResp[:len(fullResp)-1]); return err }, ErrTruncated},
	}
	for _, tt := range tests {
		err := tt.fn()
		if err == nil {
			t.Errorf("%s: no error", tt.name)
			continue
		}
		if tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestNames(t *testing.T) {
	tests := []struct{ got, want string }{
		{Allreduce.String(), "ALLREDUCE"},
		{Reducescatter.String(), "REDUCESCATTER"},
		{Error.String(), "ERROR"},
		{ResponseType(Alltoall).String(), "ALLTOALL"},
		{Average.String(), "Average"},
		{FormatShape([]int64{17, 17, 17}), "[17, 17, 17]"},
		{FormatShape(nil), "[]"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func BenchmarkEncodeRequestList(b *testing.B) {
	l := RequestList{}
	for i := 0; i < 161; i++ {
		l.Requests = append(l.Requests, Request{Name: "allreduce.grad.layer", Shape: []int64{256, 64, 3, 3}, DType: tensor.Float32, Prescale: 1, Postscale: 1})
	}
	var buf []byte
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = AppendRequestList(buf[:0], &l)
	}
	b.SetBytes(int64(len(buf)))
}
