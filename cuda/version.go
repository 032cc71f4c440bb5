package cuda

import "fmt"

// Version is a library version.
type Version struct {
	Major, Minor, Patch int
}

// String implements fmt.Stringer.
func (v Version) String() string {
	if v.Patch == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch)
}

// AtLeast reports whether v >= o.
func (v Version) AtLeast(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch >= o.Patch
}

// CUDAVersion decodes the integer cudaRuntimeGetVersion and
// cudaDriverGetVersion report: 1000*major + 10*minor (12040 is 12.4).
func CUDAVersion(code int) Version {
	return Version{Major: code / 1000, Minor: code % 1000 / 10}
}

// NCCLVersion decodes the integer ncclGetVersion reports: from NCCL 2.9 on
// it is 10000*major + 100*minor + patch (22105 is 2.21.5), before that
// 1000*major + 100*minor + patch (2708 is 2.7.8).
func NCCLVersion(code int) Version {
	if code >= ncclVersionNewScheme {
		return Version{Major: code / 10000, Minor: code % 10000 / 100, Patch: code % 100}
	}
	return Version{Major: code / 1000, Minor: code % 1000 / 100, Patch: code % 100}
}

// ncclCode re-encodes v in the new scheme, for comparisons.
func ncclCode(v Version) int { return v.Major*10000 + v.Minor*100 + v.Patch }
