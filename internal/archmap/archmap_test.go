package archmap

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/gated/gated"

// pkg is what go list says of one package of the module.
type pkg struct {
	ImportPath string
	Imports    []string
}

// modulePackages lists the module's packages, without the examples and
// the end-to-end suite, which stand outside the layers, keyed by their
// path in the module, with the module's packages each imports.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.CommandContext(t.Context(), goTool, "list", "-json=ImportPath,Imports", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel == "" {
			rel = module // the model, at the module's root
		}
		if rel == "test" || strings.HasPrefix(rel, "test/") || strings.HasPrefix(rel, "examples/") || rel == "internal/archmap" {
			continue
		}
		var imports []string
		for _, imp := range p.Imports {
			if imp == module {
				imports = append(imports, module)
			} else if r, ok := strings.CutPrefix(imp, module+"/"); ok {
				imports = append(imports, r)
			}
		}
		pkgs[rel] = imports
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages of the module: the walk is broken", len(pkgs))
	}
	return pkgs
}

// tables reads the Packages and Layers tables of docs/ARCHITECTURE.md:
// the packages the first names, and each package's layer in the second.
func tables(t *testing.T) (named []string, layers map[string]int) {
	t.Helper()
	data, err := os.ReadFile("../../docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`([a-z0-9_./-]+)`")
	layers = map[string]int{}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "#"); ok {
			section = strings.TrimSpace(strings.TrimLeft(h, "#"))
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "|") {
			continue
		}
		switch section {
		case "Packages":
			for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
				named = append(named, m[1])
			}
		case "Layers":
			n, err := strconv.Atoi(strings.TrimSpace(cells[1]))
			if err != nil {
				continue // the header and its rule
			}
			for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
				if prev, dup := layers[m[1]]; dup {
					t.Errorf("ARCHITECTURE.md puts %s in layers %d and %d", m[1], prev, n)
				}
				layers[m[1]] = n
			}
		}
	}
	if len(named) == 0 || len(layers) == 0 {
		t.Fatalf("ARCHITECTURE.md has no Packages table (%d names) or no Layers table (%d)", len(named), len(layers))
	}
	return named, layers
}

// TestTheMapNamesWhatIsThere: every package the map names exists, and
// every package of the module is on the map, with a layer.
func TestTheMapNamesWhatIsThere(t *testing.T) {
	pkgs := modulePackages(t)
	named, layers := tables(t)
	exists := func(p string) bool {
		if _, ok := pkgs[p]; ok {
			return true
		}
		// A folder that holds no Go package (sdk/python, test/vectors)
		// must at least be there.
		st, err := os.Stat(filepath.Join("../..", p))
		return err == nil && st.IsDir()
	}
	for _, p := range named {
		if !exists(p) {
			t.Errorf("ARCHITECTURE.md's package table names %s, which is gone", p)
		}
	}
	for p := range layers {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("ARCHITECTURE.md's layers name %s, which is not a package of the module", p)
		}
	}
	for _, p := range slices.Sorted(mapKeys(pkgs)) {
		if !slices.Contains(named, p) {
			t.Errorf("package %s is missing from ARCHITECTURE.md's package table", p)
		}
		if _, ok := layers[p]; !ok {
			t.Errorf("package %s is in no layer of ARCHITECTURE.md", p)
		}
	}
}

// TestImportsPointDown: a package imports only packages of lower layers.
func TestImportsPointDown(t *testing.T) {
	pkgs := modulePackages(t)
	_, layers := tables(t)
	for _, p := range slices.Sorted(mapKeys(pkgs)) {
		lp, ok := layers[p]
		if !ok {
			continue // TestTheMapNamesWhatIsThere says so
		}
		for _, imp := range pkgs[p] {
			li, ok := layers[imp]
			if ok && li >= lp {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports point down the layers of ARCHITECTURE.md", p, lp, imp, li)
			}
		}
	}
}

// publicPackages are the packages docs/API.md says a third party builds
// against besides the model itself: they expose package gated, never the
// engine.
var publicPackages = []string{module, "bus/fleet", "plugins/sdk", "mcpgate"}

// TestPublicPackagesDoNotImportTheEngine: the model, the fleet client,
// the plugin SDK and the MCP gateway import no package of engine but its
// contract (engine/wire) and the grant format (engine/grant).
func TestPublicPackagesDoNotImportTheEngine(t *testing.T) {
	pkgs := modulePackages(t)
	for _, p := range publicPackages {
		imports, ok := pkgs[p]
		if !ok {
			t.Errorf("public package %s is gone", p)
			continue
		}
		for _, imp := range imports {
			if imp == "engine" || (strings.HasPrefix(imp, "engine/") && imp != "engine/wire" && imp != "engine/grant") {
				t.Errorf("public package %s imports %s: it must expose the model of package gated, not the engine", p, imp)
			}
		}
	}
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
