package image

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarOf is a tar of files (name: content), in order; a name ending in /
// is a directory.
func tarOf(t testing.TB, files ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(f[0], "/") {
			h.Mode, h.Size, h.Typeflag = 0o755, 0, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// archiveOf is an OCI archive of one image whose one layer is layer.
func archiveOf(t testing.TB, layer []byte) []byte {
	t.Helper()
	blobs := [][2]string{{"blobs/", ""}, {"blobs/sha256/", ""}}
	put := func(media string, data []byte) descriptor {
		sum := sha256.Sum256(data)
		d := descriptor{MediaType: media, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}
		blobs = append(blobs, [2]string{"blobs/sha256/" + hex.EncodeToString(sum[:]), string(data)})
		return d
	}
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cfg := put(mediaConfig, js(map[string]any{"os": "linux", "config": map[string]any{"User": "65532:65532"}}))
	l := put(mediaLayerTar, layer)
	m := put(mediaManifest, js(map[string]any{"schemaVersion": 2, "config": cfg, "layers": []descriptor{l}}))
	files := append([][2]string{{"oci-layout", `{"imageLayoutVersion":"1.0.0"}`}, {"index.json", string(js(map[string]any{"manifests": []descriptor{m}}))}}, blobs...)
	return tarOf(t, files...)
}

func TestReadAndExtract(t *testing.T) {
	layer := tarOf(t, [2]string{"./", ""}, [2]string{"etc/", ""}, [2]string{"etc/passwd", "gated:x:65532:65532::/data:/nonexistent\n"})
	im, err := Read(bytes.NewReader(archiveOf(t, layer)))
	if err != nil {
		t.Fatal(err)
	}
	if im.Config.Runtime.User != "65532:65532" {
		t.Errorf("user %q", im.Config.Runtime.User)
	}
	dir := t.TempDir()
	files, err := im.Extract(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[1].Path != "etc/passwd" || files[1].Size != 40 {
		t.Errorf("files %+v", files)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "etc", "passwd")); err != nil || !strings.HasPrefix(string(b), "gated:") {
		t.Errorf("etc/passwd: %q, %v", b, err)
	}
}

func TestReadRefuses(t *testing.T) {
	good := archiveOf(t, tarOf(t, [2]string{"a", "x"}))
	for _, tc := range []struct {
		note string
		data []byte
	}{
		{note: "not a tar", data: []byte("hello")},
		{note: "no index", data: tarOf(t, [2]string{"oci-layout", "{}"})},
		{note: "a blob changed", data: bytes.Replace(good, []byte(`"User":"65532:65532"`), []byte(`"User":"0:00000000000"`), 1)},
	} {
		t.Run(tc.note, func(t *testing.T) {
			if _, err := Read(bytes.NewReader(tc.data)); !errors.Is(err, ErrInvalid) {
				t.Errorf("Read: %v, want ErrInvalid", err)
			}
		})
	}
}

func TestExtractRefuses(t *testing.T) {
	link := func() []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
		_ = tw.Close()
		return buf.Bytes()
	}
	for _, tc := range []struct {
		note  string
		layer []byte
	}{
		{note: "leaves the root", layer: tarOf(t, [2]string{"../escape", "x"})},
		{note: "leaves the root deeper", layer: tarOf(t, [2]string{"a/", ""}, [2]string{"a/../../escape", "x"})},
		{note: "a whiteout", layer: tarOf(t, [2]string{".wh.etc", ""})},
		{note: "a link", layer: link()},
		{note: "twice", layer: tarOf(t, [2]string{"a", "x"}, [2]string{"a", "y"})},
	} {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			root := filepath.Join(dir, "root")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := extract(Layer{MediaType: mediaLayerTar, Data: tc.layer}, root, false)
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("extract: %v, want ErrInvalid", err)
			}
			if _, err := os.Lstat(filepath.Join(dir, "escape")); err == nil {
				t.Error("a file was written outside the root")
			}
		})
	}
}

// FuzzRead: any archive is read or refused with ErrInvalid, never a panic.
func FuzzRead(f *testing.F) {
	f.Add(archiveOf(f, tarOf(f, [2]string{"a", "x"})))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := Read(bytes.NewReader(data)); err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("Read: %v does not wrap ErrInvalid", err)
		}
	})
}

// FuzzExtract: whatever a layer holds, extracting it writes nothing
// outside the root, and what it reports is what is under the root.
func FuzzExtract(f *testing.F) {
	f.Add(tarOf(f, [2]string{"./", ""}, [2]string{"etc/", ""}, [2]string{"etc/passwd", "x"}))
	f.Add(tarOf(f, [2]string{"../x", "x"}))
	f.Add(tarOf(f, [2]string{"a/./b/", ""}, [2]string{"/a/b/c", "x"}))
	f.Fuzz(func(t *testing.T, layer []byte) {
		dir := t.TempDir()
		root := filepath.Join(dir, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		files, err := extract(Layer{MediaType: mediaLayerTar, Data: layer}, root, false)
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("extract wrote beside the root: %v", entries)
		}
		if err != nil {
			return
		}
		for _, fl := range files {
			fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(fl.Path)))
			if err != nil {
				t.Fatalf("%s reported, not extracted: %v", fl.Path, err)
			}
			if fi.Mode().Type() != fl.Mode.Type()&fs.ModeType {
				t.Fatalf("%s: extracted %s, reported %s", fl.Path, fi.Mode(), fl.Mode)
			}
		}
	})
}
