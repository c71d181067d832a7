package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// image is the verified bytes of a plugin executable, held where nothing
// but this gated process can change them. Every launch of a plugin, its
// relaunches included, executes its image, never the path it was read
// from: a file swapped at that path after it was verified never runs.
type image struct {
	// sha256 is the hex digest of the bytes the launch executes.
	sha256 string
	// path is what a launch executes.
	path string
	// files are open files a launched process inherits, from fd 3 on
	// (exec.Cmd.ExtraFiles).
	files []*os.File
	// release frees the image; no launch may use it afterwards.
	release func()
}

// imageFor returns the image of spec's executable, reading and verifying
// it at the first launch and keeping it until the host closes. Specs that
// pin the same digest share one image. A file whose bytes do not have the
// pinned digest is an error wrapping ErrChecksum; actual is then the
// digest of what was read.
func (h *Host) imageFor(spec Spec) (img *image, actual string, err error) {
	h.imagesMu.Lock()
	defer h.imagesMu.Unlock()
	if h.imagesClosed {
		return nil, "", errors.New("gated is shutting down")
	}
	if img, ok := h.images[spec.SHA256]; ok {
		return img, img.sha256, nil
	}
	if spec.self {
		img, err = selfImage()
	} else {
		img, err = loadImage(spec.Path)
	}
	if err != nil {
		return nil, "", err
	}
	if img.sha256 != spec.SHA256 {
		img.release()
		return nil, img.sha256, fmt.Errorf("%w (path %s)", ErrChecksum, spec.Path)
	}
	h.images[spec.SHA256] = img
	return img, img.sha256, nil
}

// releaseImages frees every image once no plugin runs.
func (h *Host) releaseImages() {
	h.imagesMu.Lock()
	defer h.imagesMu.Unlock()
	h.imagesClosed = true
	for sum, img := range h.images {
		img.release()
		delete(h.images, sum)
	}
}

// hashFrom returns the hex SHA-256 of everything r reads.
func hashFrom(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
