package policies

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
)

// maxFileSize is the largest policy or data file Load reads.
const maxFileSize = 8 << 20

// defaultPrefix names the embedded default bundle's files in errors and
// file lists, so they cannot be mistaken for a user's files.
const defaultPrefix = "default/"

// Sources says where a policy bundle comes from.
//
// Modules keep their file names: the embedded default bundle's files are
// named "default/<file>", a user directory's files are named by their path
// joined to Dir as given ("examples/policies/freeze.rego"), with forward
// slashes. Files ending in _test.rego are included, as tests.
//
// Data documents follow stock OPA's loader: a .json, .yaml or .yml file in
// Dir is placed at the data path of its directory relative to Dir, so
// Dir/data.yaml merges at the data root and Dir/gated/config/x.yaml merges
// at data.gated.config. The file name is not part of the path. A document
// that lands at the data root must be an object; one placed deeper may be
// any value. DataFiles are merged at the data root. Files and directories
// whose names start with "." are skipped (stock OPA loads them unless run
// with --ignore '.*'), as are symlinks to directories, and files of any
// other extension.
//
// Data merges in order: the embedded default data (unless Replace), then
// Dir's documents in walk order (lexical, depth first), then DataFiles in
// order. Objects merge key by key, recursively; anywhere else the later
// value replaces the earlier one, so a user file can change one setting of
// data.gated.config and keep the others. Stock OPA instead reports two
// documents that set the same non-object path as a merge error.
type Sources struct {
	Dir       string   // a user policy directory; "" for none
	Replace   bool     // Dir replaces the embedded default bundle instead of adding to it (requires Dir)
	DataFiles []string // extra data documents, YAML or JSON, merged at the data root, in order
	Topdown   bool     // decide with OPA's topdown evaluator only (Compile's Topdown option)
}

// Load reads the embedded default bundle (unless Replace), then Dir, then
// DataFiles, and returns the combined bundle. It parses every module (Rego
// v1) and every data document, and reports all problems at once, each
// prefixed "file:line: " when a line is known. Every error wraps
// ErrInvalidBundle.
func Load(src Sources) (*Bundle, error) {
	b, _, err := LoadFiles(src)
	return b, err
}

// LoadFiles is Load that also returns the sorted names of the module and
// data files the bundle was made from, for logs. The embedded default
// bundle's files are named "default/<file>".
func LoadFiles(src Sources) (*Bundle, []string, error) {
	l := &loader{bundle: &Bundle{Modules: map[string]string{}, Data: map[string]any{}}}
	if src.Replace && src.Dir == "" {
		l.fail(errors.New("replacing the default bundle requires a policy directory"))
	}
	if !src.Replace {
		l.addDefault()
	}
	if src.Dir != "" {
		l.addDir(src.Dir, src.Replace)
	}
	for _, name := range src.DataFiles {
		l.addDataFile(name)
	}
	if len(l.problems) > 0 {
		return nil, nil, fmt.Errorf("%w: %w", ErrInvalidBundle, errors.Join(l.problems...))
	}
	slices.Sort(l.files)
	return l.bundle, l.files, nil
}

// loader accumulates a bundle, the files it came from and every problem
// found on the way.
type loader struct {
	bundle   *Bundle
	files    []string
	problems []error
}

func (l *loader) fail(err error) { l.problems = append(l.problems, err) }

// addDefault adds the embedded default bundle, its modules renamed
// "default/<file>".
func (l *loader) addDefault() {
	def, err := Default()
	if err != nil {
		l.fail(fmt.Errorf("default bundle: %w", err))
		return
	}
	for _, name := range slices.Sorted(maps.Keys(def.Modules)) {
		l.addModule(defaultPrefix+name, def.Modules[name])
	}
	// Later sources merge into these objects: copy them, in case Default
	// ever shares its data between calls.
	l.mergeData(nil, cloneData(def.Data))
	l.files = append(l.files, defaultPrefix+"data.json")
}

// addDir adds every module and data document under dir.
func (l *loader) addDir(dir string, replace bool) {
	info, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		l.fail(fmt.Errorf("policy directory %s does not exist", dir))
		return
	case err != nil:
		l.fail(fmt.Errorf("policy directory %s: %w", dir, unwrapPath(err)))
		return
	case !info.IsDir():
		l.fail(fmt.Errorf("policy directory %s is not a directory", dir))
		return
	}
	// os.DirFS follows dir itself when it is a symlink (a Kubernetes
	// ConfigMap mount, say), while fs.WalkDir does not descend into
	// symlinked directories below it.
	w := &dirWalk{loader: l, fsys: os.DirFS(dir), prefix: filepath.ToSlash(dir)}
	_ = fs.WalkDir(w.fsys, ".", w.visit) // visit reports its own errors
	if replace && w.modules == 0 {
		l.fail(fmt.Errorf("policy directory %s has no .rego files", dir))
	}
}

// dirWalk adds the files of a policy directory as fs.WalkDir visits them.
type dirWalk struct {
	*loader
	fsys    fs.FS
	prefix  string // the directory as given, with forward slashes
	modules int    // .rego files found
}

// visit adds the module or data document at slash path p, skipping dot
// files and directories, symlinked directories and other files.
func (w *dirWalk) visit(p string, d fs.DirEntry, err error) error {
	name := path.Join(w.prefix, p)
	if err != nil {
		w.fail(fmt.Errorf("%s: %w", name, unwrapPath(err)))
		return nil
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
	kind := kindOf(d.Name())
	if d.IsDir() || kind == otherFile || !w.isFile(p, name, d) {
		return nil
	}
	raw, err := readFS(w.fsys, p)
	if err != nil {
		w.fail(fmt.Errorf("%s: %w", name, err))
		return nil
	}
	if kind == regoFile {
		w.modules++
		w.addModule(name, string(raw))
		return nil
	}
	w.addData(name, dataPath(p), kind, raw)
	return nil
}

// isFile reports whether the walked entry d is a regular file or a symlink
// to one. Symlinks to directories are not followed.
func (w *dirWalk) isFile(p, name string, d fs.DirEntry) bool {
	if d.Type()&fs.ModeSymlink == 0 {
		return d.Type().IsRegular()
	}
	info, err := fs.Stat(w.fsys, p)
	if err != nil {
		w.fail(fmt.Errorf("%s: %w", name, unwrapPath(err)))
		return false
	}
	return info.Mode().IsRegular()
}

// addDataFile adds a data document given by name, at the data root.
func (l *loader) addDataFile(name string) {
	kind := kindOf(name)
	if kind != jsonFile && kind != yamlFile {
		l.fail(fmt.Errorf("data file %s: unsupported file type: want .json, .yaml or .yml", name))
		return
	}
	raw, err := readOS(name)
	if errors.Is(err, fs.ErrNotExist) {
		l.fail(fmt.Errorf("data file %s does not exist", name))
		return
	}
	if err != nil {
		l.fail(fmt.Errorf("data file %s: %w", name, err))
		return
	}
	l.addData(name, nil, kind, raw)
}

// addModule checks that src parses as a Rego v1 module and adds it.
func (l *loader) addModule(name, src string) {
	if _, dup := l.bundle.Modules[name]; dup {
		l.fail(fmt.Errorf("%s: module name already used by the default bundle", name))
		return
	}
	if _, err := ast.ParseModuleWithOpts(name, src, ast.ParserOptions{RegoVersion: ast.RegoV1}); err != nil {
		l.problems = append(l.problems, regoErrors(name, err)...)
		return
	}
	l.bundle.Modules[name] = src
	l.files = append(l.files, name)
}

// addData parses raw and merges it into the bundle's data at the path at.
func (l *loader) addData(name string, at []string, kind fileKind, raw []byte) {
	var doc any
	var err error
	if kind == yamlFile {
		doc, err = parseDataYAML(raw)
	} else {
		doc, err = parseDataJSON(raw)
	}
	if err != nil {
		l.fail(inFile(name, err))
		return
	}
	if _, ok := doc.(map[string]any); len(at) == 0 && !ok {
		l.fail(&fileError{file: name, msg: "a data document at the data root must be an object, not " + typeName(doc)})
		return
	}
	l.mergeData(at, doc)
	l.files = append(l.files, name)
}

// mergeData merges doc into the bundle's data at the path at.
func (l *loader) mergeData(at []string, doc any) {
	for i := len(at) - 1; i >= 0; i-- {
		doc = map[string]any{at[i]: doc}
	}
	mergeObjects(l.bundle.Data, doc.(map[string]any))
}

// mergeObjects merges src into dst: objects merge key by key, recursively;
// any other value in src replaces dst's.
func mergeObjects(dst, src map[string]any) {
	for k, v := range src {
		dv, dok := dst[k].(map[string]any)
		sv, sok := v.(map[string]any)
		if dok && sok {
			mergeObjects(dv, sv)
			continue
		}
		dst[k] = v
	}
}

// cloneData deep-copies the objects and arrays of a data value.
func cloneData(v any) any {
	switch v := v.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, e := range v {
			c[k] = cloneData(e)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, e := range v {
			c[i] = cloneData(e)
		}
		return c
	}
	return v
}

// dataPath is the data path of a document at slash path p relative to the
// policy directory: the names of its directories.
func dataPath(p string) []string {
	dir := path.Dir(p)
	if dir == "." {
		return nil
	}
	return strings.Split(dir, "/")
}

// fileKind is what a file holds, going by its extension.
type fileKind int

const (
	otherFile fileKind = iota
	regoFile
	jsonFile
	yamlFile
)

// kindOf matches extensions case-sensitively, as OPA's loader does.
func kindOf(name string) fileKind {
	switch filepath.Ext(name) {
	case ".rego":
		return regoFile
	case ".json":
		return jsonFile
	case ".yaml", ".yml":
		return yamlFile
	}
	return otherFile
}

func readFS(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	return readLimited(f)
}

func readOS(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	return readLimited(f)
}

var errTooBig = fmt.Errorf("is larger than the %d MiB limit", maxFileSize>>20)

// readLimited reads f, refusing directories and files over maxFileSize.
func readLimited(f fs.File) ([]byte, error) {
	info, err := f.Stat()
	if err != nil {
		return nil, unwrapPath(err)
	}
	if info.IsDir() {
		return nil, errors.New("is a directory")
	}
	if info.Size() > maxFileSize {
		return nil, errTooBig
	}
	raw, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, unwrapPath(err)
	}
	if len(raw) > maxFileSize {
		return nil, errTooBig // grew since Stat, or not a plain file
	}
	return raw, nil
}

// unwrapPath drops the operation and path of a *fs.PathError: the caller
// names the file.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

// regoErrors splits a Rego parse error into one error per problem. OPA's
// errors already start "file:line: ".
func regoErrors(name string, err error) []error {
	var list ast.Errors
	if e, ok := errors.AsType[*ast.Error](err); ok {
		list = ast.Errors{e}
	} else if !errors.As(err, &list) {
		return []error{fmt.Errorf("%s: %w", name, err)}
	}
	errs := make([]error, 0, len(list))
	for _, e := range list {
		if e.Location == nil || e.Location.Row == 0 {
			// "empty module" has no line; OPA would print "file:0: ".
			errs = append(errs, fmt.Errorf("%s: %s: %s", name, e.Code, e.Message))
			continue
		}
		errs = append(errs, e)
	}
	return errs
}

// fileError is a problem in a file, at a line and column when known (0 when
// not). The parse functions leave file empty for the caller to fill in.
type fileError struct {
	file      string
	line, col int
	msg       string
}

func (e *fileError) Error() string {
	var where []string
	if e.file != "" {
		where = append(where, e.file)
	}
	if e.line > 0 {
		where = append(where, strconv.Itoa(e.line))
		if e.col > 0 {
			where = append(where, strconv.Itoa(e.col))
		}
	}
	if len(where) == 0 {
		return e.msg
	}
	return strings.Join(where, ":") + ": " + e.msg
}

// inFile names the file err is about.
func inFile(name string, err error) error {
	if fe, ok := errors.AsType[*fileError](err); ok {
		named := *fe
		named.file = name
		return &named
	}
	return &fileError{file: name, msg: err.Error()}
}

// typeName names the JSON type of a parsed data value.
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	}
	return "a number"
}
