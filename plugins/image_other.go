//go:build !linux

package plugins

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// selfExe is empty: there is no path naming the running executable's own
// file here, so bundled reviewers are copied like any plugin.
const selfExe = ""

// selfImage copies the running executable, found by its path.
func selfImage() (*image, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locating own executable: %w", err)
	}
	return loadImage(exe)
}

// loadImage copies the executable at path into a private directory (mode
// 0700, made for this copy and removed with it) and hashes the bytes as
// they are written. Launches execute the copy.
func loadImage(path string) (*image, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading plugin executable: %w", err)
	}
	defer src.Close()
	dir, err := os.MkdirTemp("", "gated-plugin-*")
	if err != nil {
		return nil, fmt.Errorf("making a private directory for the plugin executable: %w", err)
	}
	fail := func(err error) (*image, error) {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("copying the plugin executable: %w", err)
	}
	copyPath := filepath.Join(dir, filepath.Base(path))
	dst, err := os.OpenFile(copyPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o500)
	if err != nil {
		return fail(err)
	}
	sum, err := hashFrom(io.TeeReader(src, dst))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fail(err)
	}
	return &image{sha256: sum, path: copyPath, release: func() { os.RemoveAll(dir) }}, nil
}
