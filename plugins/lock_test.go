package plugins

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
)

// writeExe writes an executable plugin file. Its contents never run.
func writeExecutable(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func digestOf(content string) string {
	h := sha256.Sum256([]byte(content))
	return hex.EncodeToString(h[:])
}

func pluginNames(ps []DirPlugin) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestScanDir(t *testing.T) {
	dir := t.TempDir()
	writeExecutable(t, dir, "beta", "b")
	writeExecutable(t, dir, "alpha-1_x", "a")
	writeExecutable(t, dir, ".hidden", "h")
	writeExecutable(t, dir, LockFileName, "{}")
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("docs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "beta"), filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "gone"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	got, err := ScanDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"alpha-1_x", "beta", "linked"}; !reflect.DeepEqual(pluginNames(got), want) {
		t.Fatalf("plugins = %v, want %v", pluginNames(got), want)
	}
	if got[1].Path != filepath.Join(dir, "beta") {
		t.Errorf("path = %q, want it under the directory", got[1].Path)
	}
}

func TestScanDirErrors(t *testing.T) {
	for _, tc := range []struct {
		note string
		file string
		want error
	}{
		{note: "upper case", file: "Reviewer", want: ErrBadName},
		{note: "dot inside", file: "review.sh", want: ErrBadName},
		{note: "too long", file: strings.Repeat("a", 65), want: ErrBadName},
	} {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			writeExecutable(t, dir, tc.file, "x")
			_, err := ScanDir(dir)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.file) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	t.Run("no directory", func(t *testing.T) {
		if _, err := ScanDir(filepath.Join(t.TempDir(), "nope")); err == nil {
			t.Fatal("scanning a missing directory succeeded")
		}
	})
	t.Run("64 characters is fine", func(t *testing.T) {
		dir := t.TempDir()
		writeExecutable(t, dir, strings.Repeat("a", 64), "x")
		if _, err := ScanDir(dir); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWriteLock(t *testing.T) {
	dir := t.TempDir()
	writeExecutable(t, dir, "zeta", "z")
	writeExecutable(t, dir, "alpha", "a")
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock, err := WriteLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "version": 1,
  "plugins": {
    "alpha": {
      "path": "alpha",
      "sha256": "` + digestOf("a") + `"
    },
    "zeta": {
      "path": "zeta",
      "sha256": "` + digestOf("z") + `"
    }
  }
}
`
	first, err := os.ReadFile(filepath.Join(dir, LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != want {
		t.Fatalf("lock file:\n%s\nwant:\n%s", first, want)
	}
	if len(lock.Plugins) != 2 || lock.Plugins["zeta"].SHA256 != digestOf("z") {
		t.Errorf("returned lock = %+v", lock)
	}
	// Locking again changes nothing, and the lock does not pin itself.
	if _, err := WriteLock(dir); err != nil {
		t.Fatal(err)
	}
	second, err := os.ReadFile(filepath.Join(dir, LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if string(second) != string(first) {
		t.Fatalf("re-locking changed the file:\n%s", second)
	}
	back, err := ReadLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, lock) {
		t.Errorf("read back %+v, wrote %+v", back, lock)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "."+LockFileName+"*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary files left behind: %v", leftovers)
	}
}

func TestWriteLockEmptyDir(t *testing.T) {
	dir := t.TempDir()
	if _, err := WriteLock(dir); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, LockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"version\": 1,\n  \"plugins\": {}\n}\n"; string(data) != want {
		t.Fatalf("lock = %q, want %q", data, want)
	}
}

func TestReadLockErrors(t *testing.T) {
	good := digestOf("x")
	for _, tc := range []struct {
		note string
		lock string // "" means no lock file
		want []string
		is   error
	}{
		{note: "missing", want: []string{"run `gated plugins lock "}, is: ErrNoLock},
		{note: "bad json", lock: "{\n  \"version\": 1,\n  \"plugins\": {,}\n}\n", want: []string{LockFileName + ":3:15:"}},
		{note: "wrong type", lock: "{\n\"version\": \"1\"}", want: []string{LockFileName + ":2:"}},
		{note: "unknown version", lock: `{"version": 2, "plugins": {}}`, want: []string{"version 2 is not supported"}},
		{note: "no version", lock: `{"plugins": {}}`, want: []string{"version 0 is not supported"}},
		{note: "unknown field", lock: `{"version": 1, "plugins": {}, "extra": true}`, want: []string{`unknown field "extra"`}},
		{note: "short sha", lock: `{"version": 1, "plugins": {"a": {"path": "a", "sha256": "abc"}}}`, want: []string{`plugin "a"`, "64 lower-case hex"}},
		{note: "bad name", lock: `{"version": 1, "plugins": {"A": {"path": "A", "sha256": "` + good + `"}}}`, want: []string{`"A"`}, is: ErrBadName},
		{note: "path escapes", lock: `{"version": 1, "plugins": {"a": {"path": "../a", "sha256": "` + good + `"}}}`, want: []string{`path "../a"`}},
		{note: "trailing data", lock: `{"version": 1, "plugins": {}} {}`, want: []string{"unexpected data"}},
		{note: "trailing close brace", lock: `{"version": 1, "plugins": {}}}`, want: []string{"unexpected data"}},
		{note: "trailing close bracket", lock: `{"version": 1, "plugins": {}}]`, want: []string{"unexpected data"}},
		// Columns count characters, as editors do: "café" is four.
		{note: "column after a multi-byte character", lock: "{\"café\": ,}", want: []string{LockFileName + ":1:10:"}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			dir := t.TempDir()
			if tc.lock != "" {
				if err := os.WriteFile(filepath.Join(dir, LockFileName), []byte(tc.lock), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadLock(dir)
			if err == nil {
				t.Fatal("ReadLock succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
}

func TestVerifyDir(t *testing.T) {
	dir := t.TempDir()
	writeExecutable(t, dir, "same", "s")
	writeExecutable(t, dir, "changed", "before")
	gone := writeExecutable(t, dir, "gone", "g")
	if _, err := WriteLock(dir); err != nil {
		t.Fatal(err)
	}
	writeExecutable(t, dir, "changed", "after")
	writeExecutable(t, dir, "extra", "e")
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	got, err := VerifyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []PinCheck{
		{Name: "changed", Path: filepath.Join(dir, "changed"), Status: StatusModified, Pinned: digestOf("before"), Actual: digestOf("after")},
		{Name: "extra", Path: filepath.Join(dir, "extra"), Status: StatusUnpinned, Actual: digestOf("e")},
		{Name: "gone", Path: filepath.Join(dir, "gone"), Status: StatusMissing, Pinned: digestOf("g")},
		{Name: "same", Path: filepath.Join(dir, "same"), Status: StatusOK, Pinned: digestOf("s"), Actual: digestOf("s")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("checks:\n%+v\nwant:\n%+v", got, want)
	}
	if _, err := VerifyDir(t.TempDir()); !errors.Is(err, ErrNoLock) {
		t.Errorf("a directory without a lock: err = %v, want ErrNoLock", err)
	}
}

func TestDirSpecs(t *testing.T) {
	dir := t.TempDir()
	writeExecutable(t, dir, "one", "1")
	writeExecutable(t, dir, "two", "2")
	if _, err := WriteLock(dir); err != nil {
		t.Fatal(err)
	}
	writeExecutable(t, dir, "two", "changed after locking")

	specs, err := DirSpecs(dir)
	if err != nil {
		t.Fatal(err)
	}
	abs, _ := filepath.Abs(dir)
	want := []Spec{
		{Name: "one", Path: filepath.Join(abs, "one"), SHA256: digestOf("1")},
		{Name: "two", Path: filepath.Join(abs, "two"), SHA256: digestOf("2")},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Fatalf("specs = %+v, want %+v (digests from the lock, not the files)", specs, want)
	}

	t.Run("unpinned", func(t *testing.T) {
		writeExecutable(t, dir, "three", "3")
		defer os.Remove(filepath.Join(dir, "three"))
		_, err := DirSpecs(dir)
		if !errors.Is(err, ErrUnpinned) || !strings.Contains(err.Error(), "three") {
			t.Fatalf("err = %v, want ErrUnpinned naming three", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		d := t.TempDir()
		p := writeExecutable(t, d, "one", "1")
		if _, err := WriteLock(d); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := DirSpecs(d)
		if err == nil || !strings.Contains(err.Error(), `"one" is pinned`) {
			t.Fatalf("err = %v, want the pinned plugin named", err)
		}
	})
	t.Run("no lock", func(t *testing.T) {
		if _, err := DirSpecs(t.TempDir()); !errors.Is(err, ErrNoLock) {
			t.Fatalf("err = %v, want ErrNoLock", err)
		}
	})
}

// A binary replaced after locking must not run: the host checks the
// digest from the lock before it executes anything.
func TestDirSpecsModifiedIsRefusedAtLaunch(t *testing.T) {
	dir := t.TempDir()
	writeExecutable(t, dir, "rev", "locked content")
	if _, err := WriteLock(dir); err != nil {
		t.Fatal(err)
	}
	writeExecutable(t, dir, "rev", "swapped content")
	specs, err := DirSpecs(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, err := NewHost(zaptest.NewLogger(t), "rev", specs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	if err := h.Start(t.Context()); !errors.Is(err, ErrChecksum) {
		t.Fatalf("Start: err = %v, want ErrChecksum", err)
	}
}

func FuzzDecodeLock(f *testing.F) {
	f.Add([]byte(`{"version": 1, "plugins": {}}`))
	f.Add([]byte(`{"version": 1, "plugins": {"a": {"path": "a", "sha256": "` + digestOf("a") + `"}}}`))
	f.Add([]byte(`{"version": 2}`))
	f.Add([]byte(`{`))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := decodeLock("fuzz", data)
		if err != nil {
			return
		}
		// A lock that reads back must survive a round trip unchanged.
		out, err := encodeLock(l)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeLock("fuzz", out)
		if err != nil {
			t.Fatalf("re-reading %s: %v", out, err)
		}
		if !reflect.DeepEqual(again, l) {
			t.Fatalf("round trip changed %+v into %+v", l, again)
		}
	})
}
