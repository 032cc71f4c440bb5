package procid

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"runtime"
	"testing"
)

func TestParseString(t *testing.T) {
	id := ID{PID: 1234, Start: 98765, Boot: "6f1c0a7e-2b9d-4c1e-9f3a-0d8e5b7c6a41", NS: "pid:[4026531836]"}
	s := id.String()
	if s != "1234:98765:6f1c0a7e-2b9d-4c1e-9f3a-0d8e5b7c6a41:pid:[4026531836]" {
		t.Errorf("String = %q", s)
	}
	got, err := Parse(s)
	if err != nil || got != id {
		t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, id)
	}
	if z, err := Parse(""); err != nil || !z.IsZero() || z.String() != "" {
		t.Errorf("Parse(\"\") = %+v, %v", z, err)
	}
	for _, bad := range []string{"1234", "1234:5:b", "x:5:b:n", "0:5:b:n", "-3:5:b:n", "12:y:b:n", "12:5::n", "12:5:b:"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' of its own.
	text := "4242 (my (odd) prog) S 1 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 2 0 777123 1000 100 18446744073709551615\n"
	st, err := ParseStat(text)
	if err != nil || st != (Stat{State: 'S', Start: 777123}) || st.Exited() {
		t.Errorf("ParseStat = %+v, %v", st, err)
	}
	z, err := ParseStat("7 (a) Z 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 55 0 0")
	if err != nil || !z.Exited() || z.Start != 55 {
		t.Errorf("zombie: %+v, %v", z, err)
	}
	for _, bad := range []string{"", "12 (a S 1", "12 (a) S 1 2 3", "12 (a) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x"} {
		if _, err := ParseStat(bad); !errors.Is(err, ErrBadStat) {
			t.Errorf("ParseStat(%q) = %v, want ErrBadStat", bad, err)
		}
	}
}

func TestSees(t *testing.T) {
	id := ID{PID: 9, Start: 1, Boot: "b1", NS: "pid:[1]"}
	tests := []struct {
		h    Here
		want bool
	}{
		{Here{"b1", "pid:[1]"}, true},
		{Here{"b2", "pid:[1]"}, false}, // another host (or a reboot)
		{Here{"b1", "pid:[2]"}, false}, // another container on the same kernel
		{Here{}, false},
	}
	for _, tt := range tests {
		if got := tt.h.Sees(id); got != tt.want {
			t.Errorf("%+v.Sees = %v, want %v", tt.h, got, tt.want)
		}
	}
}

func TestSelfAndReadStat(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux's")
	}
	me, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	h, err := Where()
	if err != nil || !h.Sees(me) || me.PID != os.Getpid() || me.Start == 0 {
		t.Fatalf("Self = %+v, Where = %+v, %v", me, h, err)
	}
	again, err := Self()
	if err != nil || again != me {
		t.Errorf("Self changed: %+v then %+v (%v)", me, again, err)
	}
	// A child that has exited and been reaped: its pid is gone.
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Skip("cannot run true:", err)
	}
	if _, err := ReadStat(c.Process.Pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadStat(reaped child) = %v, want not exist", err)
	}
}
