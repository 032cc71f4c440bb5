package optim_test

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeSnippets are the Go examples of the DistributedOptimizer's
// PyTorch-DDP features in docs/TRAINING.md (they were the README's until
// the guides moved to docs/): the first ```go block under each heading, and what
// the snippet takes as given (declared before it) and leaves unused
// (read after it), so that it type-checks as a function body.
var readmeSnippets = []struct {
	heading string
	before  string
	after   string
}{
	{"## Post-local SGD and model averaging", "var sgd optim.Optimizer; var coll optim.Collectives", "_ = opt"},
	{"## Exchanging weights instead of gradients: decentralized, low-precision and asynchronous", "var sgd optim.Optimizer; var coll optim.Collectives; var steps int", ""},
	{"## SyncBatchNorm", "var params []optim.Param; var h, dy []float32; var n int", "_, _, _ = y, dh, err"},
	{"## Communication hooks and PowerSGD", "var sgd optim.Optimizer; var coll optim.Collectives", "_ = opt"},
	{"## 8-bit exchanges and sharded optimizer state", "var sgd optim.Optimizer; var coll optim.Collectives; var params []optim.Param; var ctx context.Context", "_, _ = opt, qopt"},
}

// readmeBlock returns the first ```go block after the line heading in
// the guide.
func readmeBlock(readme []byte, heading string) (string, error) {
	i := bytes.Index(readme, []byte("\n"+heading+"\n"))
	if i < 0 {
		return "", fmt.Errorf("no heading %q", heading)
	}
	rest := readme[i+len(heading)+2:]
	if next := bytes.Index(rest, []byte("\n#")); next >= 0 {
		rest = rest[:next]
	}
	start := bytes.Index(rest, []byte("```go\n"))
	if start < 0 {
		return "", fmt.Errorf("no Go block under %q", heading)
	}
	rest = rest[start+len("```go\n"):]
	end := bytes.Index(rest, []byte("```"))
	if end < 0 {
		return "", fmt.Errorf("unterminated Go block under %q", heading)
	}
	return string(rest[:end]), nil
}

// moduleRoot returns the directory of go.mod above the working directory
// (the package's directory under go test, the repository's root when
// scripts/mpitest.sh runs the test binary).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = up
	}
}

// TestREADMESnippets type-checks docs/TRAINING.md's examples of post-local
// SGD, SyncBatchNorm, PowerSGD, ByteGrad, QAdam and Zero against the
// packages as they are, so that
// the guide cannot drift from the API (the runnable Examples,
// ExampleNewPostLocalSGD, nn's ExampleNewBatchNorm and ExampleNewPowerSGD,
// run the same calls).
func TestREADMESnippets(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list -export")
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "docs", "TRAINING.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The packages' export data, from the build cache.
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}",
		"github.com/gohorovod/gohorovod/optim/nn", "github.com/gohorovod/gohorovod/runtime")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %q", path)
		}
		return os.Open(file)
	})
	for _, s := range readmeSnippets {
		t.Run(strings.TrimPrefix(s.heading, "## "), func(t *testing.T) {
			code, err := readmeBlock(readme, s.heading)
			if err != nil {
				t.Fatal(err)
			}
			src := "package snippet\n\nimport (\n" +
				"\t\"context\"\n" +
				"\thvd \"github.com/gohorovod/gohorovod/runtime\"\n" +
				"\t\"github.com/gohorovod/gohorovod/optim\"\n" +
				"\t\"github.com/gohorovod/gohorovod/optim/nn\"\n)\n\n" +
				"var _ = hvd.Default\nvar _ = nn.Sync\nvar _ = context.Background\n\n" +
				"func _() {\n" + s.before + "\n" + code + "\n" + s.after + "\n}\n"
			f, err := parser.ParseFile(fset, "TRAINING.md", src, parser.SkipObjectResolution)
			if err != nil {
				t.Fatalf("%v\n%s", err, src)
			}
			conf := types.Config{Importer: imp}
			if _, err := conf.Check("snippet", fset, []*ast.File{f}, nil); err != nil {
				t.Fatalf("docs/TRAINING.md's example under %q does not compile: %v\n%s", s.heading, err, src)
			}
		})
	}
}
