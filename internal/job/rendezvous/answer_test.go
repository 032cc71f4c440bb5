package rendezvous

import (
	"bytes"
	"encoding/json"
	"testing"
)

// A frame built from the shared member list is byte for byte the frame
// writeFrame makes of the same answer, which every worker reads.
func TestAnswerFrameIsWriteFrame(t *testing.T) {
	sl := slots(t, "h1:2,h2:1")
	plan, err := Assign(sl)
	if err != nil {
		t.Fatal(err)
	}
	peers := make([]*peer, len(sl))
	members := make([]Member, len(sl))
	for i, s := range sl {
		m := Member{Slot: s, Data: `{"addr":"10.0.0.1:` + string(rune('0'+i)) + `"}` + "\u00e9<&>"}
		peers[i], members[i] = &peer{member: m}, m
	}
	raw, _ := json.Marshal(members)
	as := newAnswers(peers, sl)
	for i := range sl {
		a := plan[i]
		a.Round = 3
		var want bytes.Buffer
		if err := writeFrame(&want, toWorker{Assignment: &a, MembersJSON: raw}); err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		bufs := as.frame(a)
		if _, err := bufs.WriteTo(&got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("rank %d:\n got %q\nwant %q", i, got.Bytes(), want.Bytes())
		}
	}
	// The list is shared, not copied per worker.
	b0, b1 := as.frame(plan[0]), as.frame(plan[1])
	if &b0[1][0] != &b1[1][0] {
		t.Fatal("each frame has a copy of the member list")
	}
}
