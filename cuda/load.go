package cuda

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// The override variables. When one is set, the loader tries only what it
// names: a library file, a bare soname (resolved by dlopen through
// LD_LIBRARY_PATH and the ld.so cache), or a directory holding the library.
const (
	EnvCudartPath = "GOHOROVOD_CUDART_PATH"
	EnvNCCLPath   = "GOHOROVOD_NCCL_PATH"
)

// Library names tried, most generic first: the unversioned development
// link, then the sonames of CUDA 13, 12, 11 and 10.
var (
	cudartNames = []string{"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so.10.2", "libcudart.so.10.1"}
	ncclNames   = []string{"libnccl.so.2", "libnccl.so"}
)

// LoadConfig says where the loaders look. ConfigFromEnv builds the default
// one from the environment.
type LoadConfig struct {
	// CudartPath and NCCLPath, when set, are the only places tried for
	// that library (a file, a soname, or a directory).
	CudartPath string
	NCCLPath   string
	// CudartDirs and NCCLDirs are searched, in order, after the bare
	// names have been offered to dlopen.
	CudartDirs []string
	NCCLDirs   []string
}

// ConfigFromEnv reads GOHOROVOD_CUDART_PATH and GOHOROVOD_NCCL_PATH and
// builds the search directories from getenv (os.Getenv when nil) and the
// file system: $CUDA_HOME, $CUDA_PATH and $CUDA_ROOT, /usr/local/cuda, the
// distribution's library directories, $CONDA_PREFIX/lib, and the
// nvidia/cuda_runtime/lib and nvidia/nccl/lib directories of every Python
// site-packages it can find ($VIRTUAL_ENV, $CONDA_PREFIX, $PYTHONPATH, the
// prefix of every python3 on $PATH, /usr/local, /usr, /opt/conda,
// ~/.local), where NVIDIA's pip wheels (nvidia-cuda-runtime-cu12,
// nvidia-nccl-cu12) put them.
func ConfigFromEnv(getenv func(string) string) LoadConfig {
	if getenv == nil {
		getenv = os.Getenv
	}
	sys := systemDirs(getenv)
	sites := sitePackages(getenv)
	var cudartWheel, ncclWheel []string
	for _, s := range sites {
		cudartWheel = append(cudartWheel, filepath.Join(s, "nvidia", "cuda_runtime", "lib"), filepath.Join(s, "nvidia", "cu13", "lib"))
		ncclWheel = append(ncclWheel, filepath.Join(s, "nvidia", "nccl", "lib"))
	}
	return LoadConfig{
		CudartPath: getenv(EnvCudartPath),
		NCCLPath:   getenv(EnvNCCLPath),
		CudartDirs: dedupe(append(sys, cudartWheel...)),
		NCCLDirs:   dedupe(append(sys, ncclWheel...)),
	}
}

func systemDirs(getenv func(string) string) []string {
	var dirs []string
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"} {
		if p := getenv(v); p != "" {
			dirs = append(dirs, filepath.Join(p, "lib64"), filepath.Join(p, "lib"))
		}
	}
	dirs = append(dirs,
		"/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/x86_64-linux/lib",
		"/usr/local/cuda/targets/sbsa-linux/lib",
		"/usr/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu",
		"/usr/lib64",
		"/usr/lib",
	)
	if p := getenv("CONDA_PREFIX"); p != "" {
		dirs = append(dirs, filepath.Join(p, "lib"))
	}
	return dirs
}

// sitePackages lists Python package directories that exist.
func sitePackages(getenv func(string) string) []string {
	var prefixes []string
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := getenv(v); p != "" {
			prefixes = append(prefixes, p)
		}
	}
	for _, d := range filepath.SplitList(getenv("PATH")) {
		if d == "" {
			continue
		}
		if m, _ := filepath.Glob(filepath.Join(d, "python3*")); len(m) > 0 {
			prefixes = append(prefixes, filepath.Dir(filepath.Clean(d)))
		}
	}
	prefixes = append(prefixes, "/usr/local", "/usr", "/opt/conda")
	if h := getenv("HOME"); h != "" {
		prefixes = append(prefixes, filepath.Join(h, ".local"))
	}
	var out []string
	for _, p := range filepath.SplitList(getenv("PYTHONPATH")) {
		if p != "" {
			out = append(out, p)
		}
	}
	for _, p := range dedupe(prefixes) {
		for _, pat := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages", "lib64/python3*/site-packages"} {
			m, _ := filepath.Glob(filepath.Join(p, pat))
			sort.Strings(m)
			out = append(out, m...)
		}
	}
	var exist []string
	for _, d := range dedupe(out) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			exist = append(exist, d)
		}
	}
	return exist
}

func dedupe(s []string) []string {
	seen := make(map[string]bool, len(s))
	out := s[:0:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// libSpec describes one library to load.
type libSpec struct {
	what     string   // "CUDA runtime"
	env      string   // override variable
	names    []string // sonames
	symbols  []string // required, in table order
	optional map[string]bool
}

// opened is a loaded library: its handle, the file it came from, and its
// symbols in table order (0 for a missing optional one).
type opened struct {
	handle uintptr
	path   string
	syms   []uintptr
}

// openLib tries override (alone, when set), else every bare name and then
// every name in every directory, and returns the first library that has all
// the required symbols.
func openLib(l loader, spec libSpec, override string, dirs []string) (*opened, error) {
	lerr := &LoadError{Library: spec.what, EnvVar: spec.env, Override: override}
	try := func(path string) *opened {
		h, err := l.open(path)
		if err != nil {
			lerr.Attempts = append(lerr.Attempts, Attempt{Path: path, Err: err})
			return nil
		}
		syms := make([]uintptr, len(spec.symbols))
		for i, name := range spec.symbols {
			p, err := l.sym(h, name)
			if err != nil && !spec.optional[name] {
				where := path
				if i > 0 {
					where = l.where(syms[0])
				}
				l.close(h)
				lerr.Attempts = append(lerr.Attempts, Attempt{Path: path, Err: &SymbolError{Path: where, Symbol: name, Msg: err.Error()}})
				return nil
			}
			syms[i] = p
		}
		return &opened{handle: h, path: l.where(syms[0]), syms: syms}
	}
	var candidates []string
	switch {
	case override != "":
		if fi, err := os.Stat(override); err == nil && fi.IsDir() {
			for _, n := range spec.names {
				candidates = append(candidates, filepath.Join(override, n))
			}
		} else {
			candidates = []string{override}
		}
	default:
		candidates = append(candidates, spec.names...)
		for _, d := range dirs {
			found := false
			for _, n := range spec.names {
				p := filepath.Join(d, n)
				if _, err := os.Stat(p); err == nil {
					candidates = append(candidates, p)
					found = true
				}
			}
			if !found {
				lerr.Searched = append(lerr.Searched, d)
			}
		}
	}
	for _, c := range candidates {
		if o := try(c); o != nil {
			if o.path == "" {
				o.path = c
			}
			return o, nil
		}
	}
	return nil, lerr
}

// The default instances, loaded once from the environment.
var (
	loadOnce   sync.Once
	defaultRT  *Runtime
	defaultErr error

	ncclOnce      sync.Once
	defaultNCCL   *NCCL
	defaultNCCLEr error
)

// Load returns the process's CUDA runtime, loading it on first use with
// ConfigFromEnv(nil). The result (or the error) is cached: the library
// stays loaded for the life of the process.
func Load() (*Runtime, error) {
	loadOnce.Do(func() { defaultRT, defaultErr = OpenRuntime(ConfigFromEnv(nil)) })
	return defaultRT, defaultErr
}

// LoadNCCL returns the process's NCCL, loading it (and the CUDA runtime,
// through Load) on first use. The result is cached like Load's.
func LoadNCCL() (*NCCL, error) {
	ncclOnce.Do(func() {
		rt, err := Load()
		if err != nil {
			defaultNCCLEr = err
			return
		}
		defaultNCCL, defaultNCCLEr = OpenNCCL(rt, ConfigFromEnv(nil))
	})
	return defaultNCCL, defaultNCCLEr
}

// Available reports whether the CUDA runtime loads and sees at least one
// device.
func Available() bool {
	rt, err := Load()
	if err != nil {
		return false
	}
	n, err := rt.DeviceCount()
	return err == nil && n > 0
}

// Describe reports, in a few lines for `gohorovodrun --check-build`, what
// was found at run time: the CUDA runtime's version and file, the driver's
// version and the device count, NCCL's version and file, or why each is
// unavailable.
func Describe() string {
	var b strings.Builder
	rt, err := Load()
	if err != nil {
		b.WriteString("CUDA runtime: unavailable: " + indent(err.Error()) + "\n")
		b.WriteString("NCCL: unavailable (needs the CUDA runtime)\n")
		return b.String()
	}
	b.WriteString(rt.Describe() + "\n")
	n, err := LoadNCCL()
	if err != nil {
		b.WriteString("NCCL: unavailable: " + indent(err.Error()) + "\n")
	} else {
		b.WriteString("NCCL " + n.Version().String() + " (" + n.Path() + ")\n")
	}
	return b.String()
}

func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n  ") }
