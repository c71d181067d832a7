package policies

import (
	"bytes"
	"io/fs"
	"os"
	"slices"
	"strings"
)

// DefaultBundleAt compares the policy directory dir with the default
// bundle gated embeds, the bundle's own source directory being the usual
// case. same reports that dir holds the embedded bundle's files, byte for
// byte, and no other Rego module (other data documents may be there, as
// may files Load skips: dot files, files of other types); loaded on top
// of the embedded bundle, such a directory would define every rule twice,
// while loaded instead of it, it is the same policy.
// overlap lists, sorted, the .rego files at dir's top level named like a
// module of the embedded bundle. A directory that cannot be read is
// neither: Load reports why.
func DefaultBundleAt(dir string) (same bool, overlap []string) {
	want := map[string][]byte{}
	entries, err := fs.ReadDir(defaultFS, ".")
	if err != nil {
		return false, nil
	}
	for _, e := range entries {
		raw, err := fs.ReadFile(defaultFS, e.Name())
		if err != nil {
			return false, nil
		}
		want[e.Name()] = raw
	}
	fsys := os.DirFS(dir)
	same = true
	found := 0
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() || kindOf(d.Name()) == otherFile {
			return nil
		}
		def, ok := want[p] // the default bundle's files are all at its top level
		rego := kindOf(p) == regoFile
		if ok && rego {
			overlap = append(overlap, p)
		}
		if !ok {
			// More data (the source directory's testdata, say) is loaded
			// with the directory; one more module changes the policy.
			same = same && !rego
			return nil
		}
		raw, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		if bytes.Equal(raw, def) {
			found++
		} else {
			same = false
		}
		return nil
	})
	if err != nil {
		return false, nil
	}
	slices.Sort(overlap)
	return same && found == len(want), overlap
}
