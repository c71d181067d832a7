package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// File is one entry of a root filesystem, as its layer gives it.
type File struct {
	// Path is the entry's path from the root, without a leading slash.
	Path string
	// Mode holds the entry's type and permission bits.
	Mode fs.FileMode
	// UID and GID own the entry.
	UID, GID int
	// Size is a regular file's size in bytes.
	Size int64
}

// Extract writes the image's root filesystem into dir, an empty
// directory, and returns its entries in layer order. It refuses what
// gated's image never holds and a careless unpacker gets wrong: paths
// that leave the root, links of either kind, device files and the
// whiteouts of a layer over another. Running as root, it gives each
// entry its owner; otherwise entries belong to the caller.
func (im *Image) Extract(dir string) ([]File, error) {
	if len(im.Layers) != 1 {
		return nil, fmt.Errorf("%w: %d layers; gated's image has one", ErrInvalid, len(im.Layers))
	}
	return extract(im.Layers[0], dir, os.Geteuid() == 0)
}

// extract unpacks one layer into dir, chowning entries when own is set.
func extract(l Layer, dir string, own bool) ([]File, error) {
	var r io.Reader = bytes.NewReader(l.Data)
	if l.MediaType == mediaLayerGzip {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("%w: layer: %w", ErrInvalid, err)
		}
		defer zr.Close()
		r = zr
	}
	var files []File
	var modes []func() error
	seen := map[string]bool{}
	var total int64
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			// The modes come last, deepest first, so that a directory
			// without write permission is filled before it gets them.
			for i := len(modes) - 1; i >= 0; i-- {
				if err := modes[i](); err != nil {
					return nil, err
				}
			}
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: layer: %w", ErrInvalid, err)
		}
		name, err := entryPath(h.Name)
		if err != nil {
			return nil, err
		}
		if name == "" {
			continue // the root itself
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: layer holds %s twice", ErrInvalid, name)
		}
		seen[name] = true
		f := File{Path: name, Mode: h.FileInfo().Mode(), UID: h.Uid, GID: h.Gid}
		target := filepath.Join(dir, filepath.FromSlash(name))
		perm := f.Mode & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(target, 0o700); err != nil {
				return nil, fmt.Errorf("extracting %s: %w", name, err)
			}
		case tar.TypeReg:
			if total += h.Size; h.Size < 0 || total > maxBlob {
				return nil, fmt.Errorf("%w: the layer unpacks to more than %d bytes", ErrInvalid, maxBlob)
			}
			f.Size = h.Size
			if err := writeFile(target, tr, h.Size); err != nil {
				return nil, fmt.Errorf("extracting %s: %w", name, err)
			}
		default:
			return nil, fmt.Errorf("%w: %s is of tar type %q: only directories and regular files are expected", ErrInvalid, name, h.Typeflag)
		}
		modes = append(modes, func() error { return os.Chmod(target, perm) })
		if own {
			if err := os.Lchown(target, h.Uid, h.Gid); err != nil {
				return nil, fmt.Errorf("extracting %s: %w", name, err)
			}
		}
		files = append(files, f)
	}
}

// entryPath is a layer entry's path from the root, "" for the root, or an
// error for a path that would leave it or is a whiteout.
func entryPath(name string) (string, error) {
	clean := path.Clean("/" + name)
	if strings.Contains(name, "\x00") || strings.Contains(name, `\`) {
		return "", fmt.Errorf("%w: layer entry %q", ErrInvalid, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: layer entry %q leaves the root", ErrInvalid, name)
		}
	}
	if strings.HasPrefix(path.Base(clean), ".wh.") {
		return "", fmt.Errorf("%w: layer entry %q is a whiteout", ErrInvalid, name)
	}
	return strings.TrimPrefix(clean, "/"), nil
}

// writeFile creates target, which must not exist, with the n bytes of r.
func writeFile(target string, r io.Reader, n int64) error {
	out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(out, r, n); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
