package test

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// fuzzLine is one run of `make fuzz`: the package and the target.
var fuzzLine = regexp.MustCompile(`\$\(GO\) test (\.(?:/\S*)?) -run '\^\$\$' -fuzz '\^(Fuzz\w+)\$\$'`)

// fuzzFunc is the declaration of a fuzz target in a test file.
var fuzzFunc = regexp.MustCompile(`(?m)^func (Fuzz\w+)\(f \*testing\.F\)`)

// TestMakeFuzzRunsEveryTarget holds `make fuzz` to the fuzz targets of the
// module: each line names a target that its package declares, and every
// target declared is run, so a target that moves with its code or a new
// decoder's target cannot drop out of the fuzzing unnoticed.
func TestMakeFuzzRunsEveryTarget(t *testing.T) {
	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{} // "./pkg FuzzName"
	for _, m := range fuzzLine.FindAllStringSubmatch(string(makefile), -1) {
		key := m[1] + " " + m[2]
		if listed[key] {
			t.Errorf("make fuzz runs %s twice", key)
		}
		listed[key] = true
	}
	if len(listed) == 0 {
		t.Fatal("no fuzz runs found in the Makefile: the pattern no longer matches its lines")
	}

	declared := map[string]bool{}
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		pkg := "./" + filepath.ToSlash(filepath.Dir(strings.TrimPrefix(path, "../")))
		if filepath.Dir(path) == ".." {
			pkg = "."
		}
		for _, m := range fuzzFunc.FindAllStringSubmatch(string(src), -1) {
			declared[pkg+" "+m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	var stale, missing []string
	for key := range listed {
		if !declared[key] {
			stale = append(stale, key)
		}
	}
	for key := range declared {
		if !listed[key] {
			missing = append(missing, key)
		}
	}
	sort.Strings(stale)
	sort.Strings(missing)
	for _, key := range stale {
		t.Errorf("make fuzz runs %s, which that package does not declare", key)
	}
	for _, key := range missing {
		t.Errorf("%s is declared but make fuzz does not run it", key)
	}
}
