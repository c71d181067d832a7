// Package image reads the container image `make image` builds
// (deploy/image/build.sh): an OCI image archive of one manifest, its
// configuration and its layers, each checked against its digest, and the
// root filesystem those layers hold, written out to a directory. Its tests
// run gated from that root filesystem, and under a container runtime where
// the machine has one.
package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// The media types of what Open reads.
const (
	mediaManifest  = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig    = "application/vnd.oci.image.config.v1+json"
	mediaLayerTar  = "application/vnd.oci.image.layer.v1.tar"
	mediaLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// maxBlob bounds one blob of an archive, and a layer unpacked: gated's
// image is tens of megabytes.
const maxBlob = 1 << 30

// ErrInvalid is wrapped by every error about what an archive holds.
var ErrInvalid = errors.New("invalid OCI image archive")

// Image is an OCI image read from an archive: its configuration and its
// layers, in order, checked against their digests.
type Image struct {
	// Config is the image configuration as the archive holds it.
	Config Config
	// Layers are the layers' media types and bytes, bottom first.
	Layers []Layer
}

// Layer is one layer of an image.
type Layer struct {
	MediaType string
	Data      []byte
}

// Config is the part of an OCI image configuration that gated's image
// sets.
type Config struct {
	Created      string        `json:"created"`
	Architecture string        `json:"architecture"`
	OS           string        `json:"os"`
	Runtime      RuntimeConfig `json:"config"`
}

// RuntimeConfig is how a runtime starts the image: its "config" member.
type RuntimeConfig struct {
	User         string              `json:"User"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	WorkingDir   string              `json:"WorkingDir"`
	Volumes      map[string]struct{} `json:"Volumes"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	Labels       map[string]string   `json:"Labels"`
}

// descriptor points at a blob of the archive.
type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// Open reads the OCI image archive at file (an oci-archive: a tar of an
// image layout holding one manifest).
func Open(file string) (*Image, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// Read reads an OCI image archive from r. Every blob the manifest names
// must be in the archive with the digest and size it gives.
func Read(r io.Reader) (*Image, error) {
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > maxBlob {
			return nil, fmt.Errorf("%w: %s is %d bytes, more than %d", ErrInvalid, h.Name, h.Size, maxBlob)
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxBlob))
		if err != nil {
			return nil, fmt.Errorf("%w: reading %s: %w", ErrInvalid, h.Name, err)
		}
		files[path.Clean(strings.TrimPrefix(h.Name, "./"))] = data
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := decode(files["index.json"], "index.json", &index); err != nil {
		return nil, err
	}
	if len(index.Manifests) != 1 || index.Manifests[0].MediaType != mediaManifest {
		return nil, fmt.Errorf("%w: index.json must name one image manifest (%s), not %d", ErrInvalid, mediaManifest, len(index.Manifests))
	}
	raw, err := blob(files, index.Manifests[0])
	if err != nil {
		return nil, err
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := decode(raw, "the manifest", &manifest); err != nil {
		return nil, err
	}
	if manifest.Config.MediaType != mediaConfig {
		return nil, fmt.Errorf("%w: config media type %q, want %s", ErrInvalid, manifest.Config.MediaType, mediaConfig)
	}
	if raw, err = blob(files, manifest.Config); err != nil {
		return nil, err
	}
	im := &Image{}
	if err := decode(raw, "the image configuration", &im.Config); err != nil {
		return nil, err
	}
	for _, d := range manifest.Layers {
		if d.MediaType != mediaLayerTar && d.MediaType != mediaLayerGzip {
			return nil, fmt.Errorf("%w: layer media type %q", ErrInvalid, d.MediaType)
		}
		data, err := blob(files, d)
		if err != nil {
			return nil, err
		}
		im.Layers = append(im.Layers, Layer{MediaType: d.MediaType, Data: data})
	}
	return im, nil
}

// blob returns the blob d names, checked against its size and digest.
func blob(files map[string][]byte, d descriptor) ([]byte, error) {
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexSum) != sha256.Size*2 || strings.ToLower(hexSum) != hexSum {
		return nil, fmt.Errorf("%w: digest %q is not sha256:<64 lower-case hex digits>", ErrInvalid, d.Digest)
	}
	data, ok := files["blobs/sha256/"+hexSum]
	if !ok {
		return nil, fmt.Errorf("%w: blob %s is missing", ErrInvalid, d.Digest)
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != hexSum || int64(len(data)) != d.Size {
		return nil, fmt.Errorf("%w: blob %s does not have its digest and size (%d bytes)", ErrInvalid, d.Digest, d.Size)
	}
	return data, nil
}

// decode reads the JSON document data, named what in errors, into v.
func decode(data []byte, what string, v any) error {
	if data == nil {
		return fmt.Errorf("%w: %s is missing", ErrInvalid, what)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, what, err)
	}
	return nil
}
