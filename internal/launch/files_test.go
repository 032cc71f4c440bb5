package launch

import (
	"strings"
	"testing"

	"github.com/gohorovod/gohorovod/internal/job/fdlimit"
)

// What the launcher needs grows by a constant per worker: 600 local
// workers fit the common 4096 hard limit, 1000 need more than 1024 and
// fit 8192, 800 remote ones with --output-filename need 6400 and more.
func TestFilesNeeded(t *testing.T) {
	cases := []struct {
		workers, remote int
		outputs         bool
		want            uint64
	}{
		{1, 0, false, 5},
		{600, 0, false, 3000},
		{1000, 0, false, 5000},
		{800, 800, true, 800 * 8},
	}
	for _, c := range cases {
		if got := filesNeeded(c.workers, c.remote, c.outputs); got != c.want {
			t.Errorf("filesNeeded(%d, %d, %v) = %d, want %d", c.workers, c.remote, c.outputs, got, c.want)
		}
	}
}

// The launcher's plan for its limit on open files: a job that fits the
// soft limit changes nothing; one that fits the hard limit raises the
// soft one to it; one beyond the hard limit is refused with an error
// that names the need, the limits and ulimit.
func TestFilesPlan(t *testing.T) {
	have := fdlimit.Limits{Soft: 1024, Hard: 4096}
	if _, raise, err := fdlimit.Plan("x", filesNeeded(100, 0, false), have); raise || err != nil {
		t.Fatalf("100 workers under %+v: raise %v, %v", have, raise, err)
	}
	if soft, raise, err := fdlimit.Plan("x", filesNeeded(600, 0, false), have); !raise || soft != 4096 || err != nil {
		t.Fatalf("600 workers under %+v: soft %d, raise %v, %v; want 4096, true", have, soft, raise, err)
	}
	_, _, err := fdlimit.Plan("gohorovodrun with 1000 workers", filesNeeded(1000, 0, false), have)
	if err == nil {
		t.Fatalf("1000 workers under %+v: no error", have)
	}
	for _, want := range []string{"gohorovodrun with 1000 workers", "5064", "hard 4096", "ulimit -Hn 5064"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
}

// A job larger than any limit is refused before a worker is started.
func TestEnsureFilesRefusesBeyondTheHardLimit(t *testing.T) {
	lim, err := fdlimit.Ensure("the test", 0)
	if err != nil || lim.Hard == fdlimit.Unlimited {
		t.Skip("no finite RLIMIT_NOFILE here:", err)
	}
	n := int(lim.Hard/filesPerWorker) + 1
	err = ensureFiles(n, 0, false)
	if err == nil || !strings.Contains(err.Error(), "ulimit") || !strings.Contains(err.Error(), "cannot start the job") {
		t.Fatalf("ensureFiles(%d) under hard limit %d: %v", n, lim.Hard, err)
	}
}
