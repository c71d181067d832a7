package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// writeTree writes files, keyed by slash path, under a new temporary
// directory and returns the directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func mustLoad(t *testing.T, src Sources) (*Bundle, []string) {
	t.Helper()
	b, files, err := LoadFiles(src)
	if err != nil {
		t.Fatalf("LoadFiles: %v", err)
	}
	return b, files
}

// dig follows keys down nested objects of data.
func dig(t *testing.T, data map[string]any, keys ...string) any {
	t.Helper()
	var v any = data
	for i, k := range keys {
		obj, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("data.%s is %T, not an object", strings.Join(keys[:i], "."), v)
		}
		if v, ok = obj[k]; !ok {
			t.Fatalf("data.%s is not set", strings.Join(keys[:i+1], "."))
		}
	}
	return v
}

// slashJoin is dir, in slash form, joined with name: a user file's name.
func slashJoin(dir, name string) string {
	return filepath.ToSlash(dir) + "/" + name
}

const freezeModule = `package gated

deny contains {"rule": "freeze", "message": "changes are frozen"} if data.gated.config.frozen == true
`

func TestLoadDefaultOnly(t *testing.T) {
	def, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b, files := mustLoad(t, Sources{})
	var want []string
	for name, src := range def.Modules {
		want = append(want, "default/"+name)
		if got := b.Modules["default/"+name]; got != src {
			t.Errorf("module default/%s differs from the embedded %s", name, name)
		}
	}
	if got := slices.Sorted(maps.Keys(b.Modules)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("modules = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(b.Data, def.Data) {
		t.Errorf("data differs from the embedded data.json")
	}
	want = append(want, "default/data.json")
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("files = %v, want %v", files, want)
	}
}

func TestLoadAddsUserModules(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"freeze.rego":      freezeModule,
		"freeze_test.rego": "package gated_test\n\ntest_nothing if true\n",
		"sub/more.rego":    "package gated.more\n\nx := 1\n",
	})
	b, files := mustLoad(t, Sources{Dir: dir})
	for _, name := range []string{"freeze.rego", "freeze_test.rego", "sub/more.rego"} {
		if _, ok := b.Modules[slashJoin(dir, name)]; !ok {
			t.Errorf("module %s missing; have %v", slashJoin(dir, name), slices.Sorted(maps.Keys(b.Modules)))
		}
	}
	if b.Modules[slashJoin(dir, "freeze.rego")] != freezeModule {
		t.Errorf("freeze.rego source not kept as written")
	}
	if _, ok := b.Modules["default/gated.rego"]; !ok {
		t.Errorf("default modules dropped without Replace")
	}
	if !slices.IsSorted(files) || !slices.Contains(files, slashJoin(dir, "sub/more.rego")) || !slices.Contains(files, "default/gated.rego") {
		t.Errorf("files = %v", files)
	}
}

func TestLoadNamesModulesByDirAsGiven(t *testing.T) {
	root := writeTree(t, map[string]string{"examples/policies/freeze.rego": freezeModule})
	t.Chdir(root)
	for _, dir := range []string{"examples/policies", "./examples/policies/", "examples//policies"} {
		b, _ := mustLoad(t, Sources{Dir: dir, Replace: true})
		if got := slices.Collect(maps.Keys(b.Modules)); !slices.Equal(got, []string{"examples/policies/freeze.rego"}) {
			t.Errorf("Dir %q: modules = %v, want [examples/policies/freeze.rego]", dir, got)
		}
	}
}

func TestLoadReplaceDropsDefault(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"freeze.rego": freezeModule,
		"data.json":   `{"site": {"name": "lab"}}`,
	})
	b, files := mustLoad(t, Sources{Dir: dir, Replace: true})
	if got := slices.Collect(maps.Keys(b.Modules)); !slices.Equal(got, []string{slashJoin(dir, "freeze.rego")}) {
		t.Errorf("modules = %v, want only the user module", got)
	}
	if _, ok := b.Data["gated"]; ok {
		t.Errorf("default data kept with Replace: %v", b.Data)
	}
	if got := dig(t, b.Data, "site", "name"); got != "lab" {
		t.Errorf("data.site.name = %v", got)
	}
	want := []string{slashJoin(dir, "data.json"), slashJoin(dir, "freeze.rego")}
	if !slices.Equal(files, want) {
		t.Errorf("files = %v, want %v", files, want)
	}
}

func TestLoadPlacesDataByDirectory(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"data.yaml":                 "site: lab\n",
		"gated/config/freeze.yaml":  "frozen: true\n",
		"gated/config/windows.json": `{"windows": ["sat"]}`,
		"gated/extra/list.json":     `["a", "b"]`,
		"team.ops/members.yml":      "- ana\n",
	})
	b, _ := mustLoad(t, Sources{Dir: dir, Replace: false})
	if got := dig(t, b.Data, "site"); got != "lab" {
		t.Errorf("data.site = %v: data.yaml at the root must merge at the data root", got)
	}
	if got := dig(t, b.Data, "gated", "config", "frozen"); got != true {
		t.Errorf("data.gated.config.frozen = %v", got)
	}
	if got := dig(t, b.Data, "gated", "config", "windows"); !reflect.DeepEqual(got, []any{"sat"}) {
		t.Errorf("data.gated.config.windows = %v", got)
	}
	// A document below the root may be any value; the file name is not
	// part of the path.
	if got := dig(t, b.Data, "gated", "extra"); !reflect.DeepEqual(got, []any{"a", "b"}) {
		t.Errorf("data.gated.extra = %v", got)
	}
	// A directory name with a dot is one key, as in OPA.
	if got := dig(t, b.Data, "team.ops"); !reflect.DeepEqual(got, []any{"ana"}) {
		t.Errorf(`data["team.ops"] = %v`, got)
	}
	if got := dig(t, b.Data, "gated", "config", "default_persona"); got != "reviewer" {
		t.Errorf("default data.gated.config.default_persona lost: %v", got)
	}
}

func TestLoadLaterSourceWins(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"gated/config/persona.yaml": "default_persona: operator\nlevel: 1\n",
	})
	extra := writeTree(t, map[string]string{
		"a.json": `{"gated": {"config": {"level": 2, "skip_review_actions": ["noop"]}}}`,
		"b.yaml": "gated:\n  config:\n    level: 3\n",
	})
	b, files := mustLoad(t, Sources{
		Dir:       dir,
		DataFiles: []string{filepath.Join(extra, "a.json"), filepath.Join(extra, "b.yaml")},
	})
	cfg, ok := dig(t, b.Data, "gated", "config").(map[string]any)
	if !ok {
		t.Fatalf("data.gated.config is not an object")
	}
	if cfg["default_persona"] != "operator" {
		t.Errorf("default_persona = %v, want the directory's operator", cfg["default_persona"])
	}
	if cfg["level"] != json.Number("3") {
		t.Errorf("level = %v, want 3 from the last data file", cfg["level"])
	}
	if !reflect.DeepEqual(cfg["skip_review_actions"], []any{"noop"}) {
		t.Errorf("skip_review_actions = %v", cfg["skip_review_actions"])
	}
	if !reflect.DeepEqual(cfg["production_tags"], []any{"production", "prod"}) {
		t.Errorf("sibling production_tags of the default config lost: %v", cfg["production_tags"])
	}
	if _, ok := dig(t, b.Data, "gated").(map[string]any)["sops"]; !ok {
		t.Errorf("default data.gated.sops lost")
	}
	for _, f := range []string{filepath.Join(extra, "a.json"), filepath.Join(extra, "b.yaml"), slashJoin(dir, "gated/config/persona.yaml")} {
		if !slices.Contains(files, f) {
			t.Errorf("files %v lacks %s", files, f)
		}
	}
}

func TestLoadDataFilesAtRoot(t *testing.T) {
	extra := writeTree(t, map[string]string{"site.yaml": "site:\n  name: lab\n  opened: 2026-12-24T00:00:00Z\n"})
	b, _ := mustLoad(t, Sources{DataFiles: []string{filepath.Join(extra, "site.yaml")}})
	if got := dig(t, b.Data, "site", "name"); got != "lab" {
		t.Errorf("data.site.name = %v", got)
	}
	if got := dig(t, b.Data, "site", "opened"); got != "2026-12-24T00:00:00Z" {
		t.Errorf("data.site.opened = %#v, want the timestamp as written", got)
	}
	if _, ok := b.Data["gated"]; !ok {
		t.Errorf("default data lost")
	}
}

func TestLoadSkipsHiddenAndOtherFiles(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"freeze.rego":        freezeModule,
		".freeze.rego.swp":   "\x00garbage",
		".hidden.rego":       "not rego at all",
		".git/config.json":   "{not json",
		".cache/x/data.yaml": ": : :",
		"README.md":          "# notes",
		"notes.txt":          "{",
		"data.JSON":          "{", // extensions match case-sensitively, as in OPA
	})
	b, files := mustLoad(t, Sources{Dir: dir, Replace: true})
	if len(b.Modules) != 1 || len(b.Data) != 0 || len(files) != 1 {
		t.Errorf("modules %v, data %v, files %v: want only freeze.rego", slices.Collect(maps.Keys(b.Modules)), b.Data, files)
	}
}

func TestLoadSymlinks(t *testing.T) {
	target := writeTree(t, map[string]string{
		"shared.rego":    "package shared\n\nx := 1\n",
		"sub/other.rego": "package shared.other\n\ny := 1\n",
	})
	dir := writeTree(t, map[string]string{"freeze.rego": freezeModule})
	links := map[string]string{
		"shared.rego": filepath.Join(target, "shared.rego"), // a file: followed
		"sub":         filepath.Join(target, "sub"),         // a directory: not followed
		"loop":        dir,                                  // would loop forever if followed
	}
	for name, to := range links {
		if err := os.Symlink(to, filepath.Join(dir, name)); err != nil {
			t.Skipf("symlinks unavailable: %v", err)
		}
	}
	// The policy directory itself may be a symlink (a Kubernetes ConfigMap
	// mount, say).
	linkedDir := filepath.Join(t.TempDir(), "policies")
	if err := os.Symlink(dir, linkedDir); err != nil {
		t.Fatal(err)
	}
	b, _ := mustLoad(t, Sources{Dir: linkedDir, Replace: true})
	want := []string{slashJoin(linkedDir, "freeze.rego"), slashJoin(linkedDir, "shared.rego")}
	if got := slices.Sorted(maps.Keys(b.Modules)); !slices.Equal(got, want) {
		t.Errorf("modules = %v, want %v", got, want)
	}
	// A dangling symlink with a policy extension is an error naming it.
	if err := os.Symlink(filepath.Join(target, "gone.rego"), filepath.Join(dir, "gone.rego")); err != nil {
		t.Fatal(err)
	}
	_, err := Load(Sources{Dir: dir})
	if want := slashJoin(dir, "gone.rego") + ": no such file or directory"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want one containing %q", err, want)
	}
}

func TestLoadCompilesWithUserDeny(t *testing.T) {
	dir := writeTree(t, map[string]string{
		"boom.rego": `package gated

deny contains {"rule": "x", "message": "y"} if input.proposal.action == "boom"
`,
	})
	b, err := Load(Sources{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(t.Context(), b); err != nil {
		t.Fatalf("Compile: %v", err)
	}
}

func TestLoadRejectsModuleNameClash(t *testing.T) {
	root := writeTree(t, map[string]string{"default/gated.rego": freezeModule})
	t.Chdir(root)
	_, err := Load(Sources{Dir: "default"})
	if err == nil || !strings.Contains(err.Error(), "default/gated.rego: module name already used") {
		t.Fatalf("err = %v, want a clash on default/gated.rego", err)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		// src builds the sources from the fixture directory.
		src  func(dir string) Sources
		want []string // substrings; "DIR" stands for the fixture directory
	}{{
		name:  "rego syntax error",
		files: map[string]string{"bad.rego": "package gated\n\nallow if {\n\tinput.x ==\n"},
		want:  []string{"DIR/bad.rego:5: rego_parse_error"},
	}, {
		name:  "empty rego module",
		files: map[string]string{"empty.rego": "# nothing\n"},
		want:  []string{"DIR/empty.rego: rego_parse_error: empty module"},
	}, {
		name:  "rego v0 syntax",
		files: map[string]string{"v0.rego": "package gated\n\nallow { true }\n"},
		want:  []string{"DIR/v0.rego:3: rego_parse_error"},
	}, {
		name:  "invalid yaml",
		files: map[string]string{"gated/bad.yaml": "a: 1\nb: [1, 2\nc: 3\n"},
		want:  []string{"DIR/gated/bad.yaml:2: did not find expected ',' or ']'"},
	}, {
		name:  "invalid json",
		files: map[string]string{"bad.json": "{\n  \"a\": 1,\n  \"b\": tru\n}\n"},
		want:  []string{"DIR/bad.json:3:11: invalid character '\\n' in literal true (expecting 'e')"},
	}, {
		name:  "truncated json",
		files: map[string]string{"bad.json": "{\"a\": [1,\n2"},
		want:  []string{"DIR/bad.json:2:1: unexpected end of JSON input"},
	}, {
		name:  "trailing json",
		files: map[string]string{"bad.json": "{}\n{}\n"},
		want:  []string{"DIR/bad.json:2:1: invalid character '{' after top-level value"},
	}, {
		name:  "duplicate json key",
		files: map[string]string{"dup.json": "{\n  \"a\": 1,\n  \"b\": {\"c\": 1, \"c\": 2}\n}\n"},
		want:  []string{`DIR/dup.json:3:17: duplicate key "c" (first at line 3)`},
	}, {
		name:  "duplicate yaml key",
		files: map[string]string{"dup.yaml": "a: 1\nb: 2\na: 3\n"},
		want:  []string{`DIR/dup.yaml:3: duplicate key "a" (first at line 1)`},
	}, {
		name:  "duplicate yaml key quoted",
		files: map[string]string{"dup.yaml": "a: 1\n\"a\": 3\n"},
		want:  []string{`DIR/dup.yaml:2: duplicate key "a" (first at line 1)`},
	}, {
		name:  "non-string yaml key",
		files: map[string]string{"keys.yaml": "ok: 1\n42: answer\n"},
		want:  []string{"DIR/keys.yaml:2: key 42 is not a string"},
	}, {
		name:  "yaml infinity",
		files: map[string]string{"inf.yaml": "limit: .inf\n"},
		want:  []string{"DIR/inf.yaml:1: .inf is not a finite number"},
	}, {
		name:  "two yaml documents",
		files: map[string]string{"two.yaml": "a: 1\n---\nb: 2\n"},
		want:  []string{"DIR/two.yaml:2: holds more than one YAML document"},
	}, {
		name:  "self-referencing yaml anchor",
		files: map[string]string{"self.yaml": "a: &x\n  b: *x\n"},
		want:  []string{"DIR/self.yaml:2: alias *x refers to a value that contains it"},
	}, {
		name:  "yaml alias bomb",
		files: map[string]string{"bomb.yaml": aliasBomb},
		want:  []string{"DIR/bomb.yaml:", "aliases expand to more than 100000 values"},
	}, {
		name:  "unsupported yaml tag",
		files: map[string]string{"tag.yaml": "a: !!binary aGVsbG8=\n"},
		want:  []string{"DIR/tag.yaml:1: unsupported YAML tag !!binary"},
	}, {
		name:  "empty json",
		files: map[string]string{"empty.json": " \n"},
		want:  []string{"DIR/empty.json: is empty"},
	}, {
		name:  "empty yaml",
		files: map[string]string{"empty.yaml": "# just a comment\n"},
		want:  []string{"DIR/empty.yaml: is empty"},
	}, {
		name:  "non-object root json",
		files: map[string]string{"data.json": "[1, 2]"},
		want:  []string{"DIR/data.json: a data document at the data root must be an object, not an array"},
	}, {
		name:  "non-object root yaml",
		files: map[string]string{"data.yaml": "hello\n"},
		want:  []string{"DIR/data.yaml: a data document at the data root must be an object, not a string"},
	}, {
		name:  "non-object data file",
		files: map[string]string{"list.yml": "- 1\n"},
		src:   func(dir string) Sources { return Sources{DataFiles: []string{filepath.Join(dir, "list.yml")}} },
		want:  []string{"DIR/list.yml: a data document at the data root must be an object, not an array"},
	}, {
		name: "missing dir",
		src:  func(dir string) Sources { return Sources{Dir: filepath.Join(dir, "nope")} },
		want: []string{"policy directory DIR/nope does not exist"},
	}, {
		name:  "dir is a file",
		files: map[string]string{"file.rego": freezeModule},
		src:   func(dir string) Sources { return Sources{Dir: filepath.Join(dir, "file.rego")} },
		want:  []string{"policy directory DIR/file.rego is not a directory"},
	}, {
		name:  "replace without rego files",
		files: map[string]string{"data.json": "{}", "notes.md": "x"},
		src:   func(dir string) Sources { return Sources{Dir: dir, Replace: true} },
		want:  []string{"policy directory DIR has no .rego files"},
	}, {
		name: "replace without dir",
		src:  func(string) Sources { return Sources{Replace: true} },
		want: []string{"replacing the default bundle requires a policy directory"},
	}, {
		name: "missing data file",
		src:  func(dir string) Sources { return Sources{DataFiles: []string{filepath.Join(dir, "nope.json")}} },
		want: []string{"data file DIR/nope.json does not exist"},
	}, {
		name:  "data file of unknown type",
		files: map[string]string{"x.toml": "a = 1"},
		src:   func(dir string) Sources { return Sources{DataFiles: []string{filepath.Join(dir, "x.toml")}} },
		want:  []string{"data file DIR/x.toml: unsupported file type: want .json, .yaml or .yml"},
	}, {
		name:  "data file is a directory",
		files: map[string]string{"d.json/x": ""},
		src:   func(dir string) Sources { return Sources{DataFiles: []string{filepath.Join(dir, "d.json")}} },
		want:  []string{"data file DIR/d.json: is a directory"},
	}, {
		name: "problems reported together",
		files: map[string]string{
			"a.rego":        "package gated\n\np := \n",
			"ok.rego":       freezeModule,
			"gated/b.json":  "{\"x\": 1,}",
			"gated/c.yaml":  "x: [\n",
			"gated/ok.yaml": "fine: true\n",
		},
		src: func(dir string) Sources {
			return Sources{Dir: dir, DataFiles: []string{filepath.Join(dir, "missing.yaml")}}
		},
		want: []string{"DIR/a.rego:4: ", "DIR/gated/b.json:1:9: ", "DIR/gated/c.yaml:2: ", "data file DIR/missing.yaml does not exist"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeTree(t, tt.files)
			src := Sources{Dir: dir}
			if tt.src != nil {
				src = tt.src(dir)
			}
			b, files, err := LoadFiles(src)
			if err == nil {
				t.Fatalf("LoadFiles succeeded (%d modules, files %v), want an error", len(b.Modules), files)
			}
			if !errors.Is(err, ErrInvalidBundle) {
				t.Errorf("error does not wrap ErrInvalidBundle: %v", err)
			}
			if b != nil || files != nil {
				t.Errorf("LoadFiles returned a bundle or files with an error")
			}
			for _, w := range tt.want {
				if w = strings.ReplaceAll(w, "DIR", filepath.ToSlash(dir)); !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

// aliasBomb is a "billion laughs" document: nine levels of nine aliases.
var aliasBomb = func() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		prev := "*a" + string(rune('0'+i-1))
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [")
		b.WriteString(strings.TrimSuffix(strings.Repeat(prev+", ", 9), ", "))
		b.WriteString("]\n")
	}
	return b.String()
}()

func TestLoadRefusesOversizeFiles(t *testing.T) {
	dir := writeTree(t, map[string]string{"freeze.rego": freezeModule})
	for _, name := range []string{"big.json", "big.rego"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// A sparse file: nothing is written.
		if err := os.Truncate(filepath.Join(dir, name), maxFileSize+1); err != nil {
			t.Fatal(err)
		}
	}
	_, err := Load(Sources{Dir: dir, DataFiles: []string{filepath.Join(dir, "big.json")}})
	if !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("err = %v, want an invalid bundle", err)
	}
	for _, want := range []string{
		slashJoin(dir, "big.json") + ": is larger than the 8 MiB limit",
		slashJoin(dir, "big.rego") + ": is larger than the 8 MiB limit",
		"data file " + filepath.Join(dir, "big.json") + ": is larger than the 8 MiB limit",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// Exactly the limit is fine as far as size goes.
	exact := filepath.Join(dir, "exact.json")
	raw := append([]byte(`{"a": "`), bytes.Repeat([]byte("x"), maxFileSize-len(`{"a": ""}`))...)
	if err := os.WriteFile(exact, append(raw, `"}`...), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Sources{DataFiles: []string{exact}}); err != nil {
		t.Errorf("a file of exactly 8 MiB: %v", err)
	}
}
