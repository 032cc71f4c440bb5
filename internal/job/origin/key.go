package origin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// EnvKeyFile names the per-user key file from which JobSecret derives a
// job's secret when GOHOROVOD_SECRET is not set.
const EnvKeyFile = "GOHOROVOD_KEY_FILE"

// keyBytes is the size of a new key file's key.
const keyBytes = 32

// KeyFile is the key file lookup names: GOHOROVOD_KEY_FILE, else
// $HOME/.gohorovod/key.
func KeyFile(lookup func(string) (string, bool)) (string, error) {
	if f, ok := lookup(EnvKeyFile); ok && strings.TrimSpace(f) != "" {
		return f, nil
	}
	home, ok := lookup("HOME")
	if !ok || home == "" {
		return "", fmt.Errorf("no key file for the job secret: set GOHOROVOD_SECRET (the same hex key for every worker), or %s, or HOME", EnvKeyFile)
	}
	return filepath.Join(home, ".gohorovod", "key"), nil
}

// JobSecret is the secret of job (Placement.Job) derived from the key in
// file: HMAC-SHA256 of the job's identity under the key. The file is
// created with a new random key, mode 0600, when it does not exist; where
// several workers create it at once, one wins and all read its key. It is
// refused when its group or others may read or write it, or it holds no
// key.
func JobSecret(file, job string) ([]byte, error) {
	key, err := readKey(file)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKey(file); err != nil {
			return nil, err
		}
		key, err = readKey(file)
	}
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("gohorovod job secret\x00" + job))
	return m.Sum(nil), nil
}

func readKey(file string) ([]byte, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("job secret: key file %s has mode %v: others could join your jobs; chmod 600 it", file, fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("job secret: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) < 16 {
		return nil, fmt.Errorf("job secret: key file %s does not hold a hex key of 16 bytes or more", file)
	}
	return key, nil
}

// createKey writes a new key to a private temporary file beside file and
// links it into place, which fails if another worker got there first.
func createKey(file string) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("job secret: %w", err)
	}
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return fmt.Errorf("job secret: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		tmp.Close()
		return fmt.Errorf("job secret: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("job secret: %w", err)
	}
	// CreateTemp made it 0600.
	if err := os.Link(tmp.Name(), file); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("job secret: %w", err)
	}
	return nil
}
