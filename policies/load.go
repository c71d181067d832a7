package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gated/gated/internal/strictjson"
	"github.com/gated/gated/internal/yamlpos"
	"github.com/open-policy-agent/opa/v1/ast"
	"go.yaml.in/yaml/v3"
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

// maxDataDepth is how deeply a data document may nest objects and arrays.
const maxDataDepth = 1000

// maxAliasNodes and maxAliasText cap how many nodes, and how many bytes of
// scalar text, YAML aliases may expand to, against "billion laughs"
// documents.
const (
	maxAliasNodes = 100_000
	maxAliasText  = maxFileSize
)

var errEmpty = &fileError{msg: "is empty"}

// parseDataJSON parses a JSON data document. Numbers stay json.Number;
// duplicate keys, trailing data and empty input are errors, positioned at
// line and column.
func parseDataJSON(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errEmpty
	}
	v, err := strictjson.ReadValue(raw, strictjson.ValueOptions{MaxDepth: maxDataDepth, Number: regoNumber})
	if err == nil {
		return v, nil
	}
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return nil, errorAt(raw, se.Offset-1, "%s", se.Error())
	}
	ve, ok := errors.AsType[*strictjson.ValueError](err)
	switch {
	case !ok:
		return nil, &fileError{msg: err.Error()}
	case errors.Is(err, strictjson.ErrDuplicateKey):
		line, _ := strictjson.Position(raw, ve.First)
		return nil, errorAt(raw, ve.Offset, "duplicate key %q (first at line %d)", ve.Key, line)
	case errors.Is(err, strictjson.ErrTooDeep):
		return nil, errorAt(raw, ve.Offset, "nested deeper than %d levels", maxDataDepth)
	}
	return nil, errorAt(raw, ve.Offset, "%s", ve.Err)
}

// regoNumber refuses a number Rego cannot hold: Rego refuses exponents
// beyond about ±10^30000, which JSON allows.
func regoNumber(n json.Number) error {
	if _, err := ast.NumberChecked(string(n)); err != nil {
		return errors.New("number too large or too small for Rego")
	}
	return nil
}

// errorAt is an error at byte offset off of raw.
func errorAt(raw []byte, off int64, format string, args ...any) *fileError {
	line, col := strictjson.Position(raw, off)
	return &fileError{line: line, col: col, msg: fmt.Sprintf(format, args...)}
}

// parseDataYAML parses a single-document YAML data document into the values
// JSON has: objects with string keys, arrays, strings, booleans, null and
// json.Number. Timestamps stay the strings they were written as; aliases
// are expanded. Errors are positioned at a line.
func parseDataYAML(raw []byte) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errEmpty
	}
	root, err := yamlpos.Parse(raw)
	if errors.Is(err, yamlpos.ErrEmpty) {
		return nil, errEmpty // comments only
	}
	if e, ok := errors.AsType[*yamlpos.Error](err); ok {
		return nil, &fileError{line: e.Line, msg: e.Msg}
	}
	if err != nil {
		return nil, &fileError{msg: err.Error()}
	}
	c := &yamlConverter{active: map[*yaml.Node]bool{}}
	return c.value(root, 0, false)
}

// yamlConverter turns yaml.Nodes into data values.
type yamlConverter struct {
	expanded     int                 // nodes converted through aliases
	expandedText int                 // bytes of scalars converted through aliases
	active       map[*yaml.Node]bool // anchored nodes being converted
}

// value converts n, inside depth mappings and sequences; aliased says
// whether n is reached through an alias.
func (c *yamlConverter) value(n *yaml.Node, depth int, aliased bool) (any, error) {
	if (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && depth >= maxDataDepth {
		return nil, &fileError{line: n.Line, msg: fmt.Sprintf("nested deeper than %d levels", maxDataDepth)}
	}
	if aliased {
		if err := c.expand(n); err != nil {
			return nil, err
		}
	}
	if n.Anchor != "" {
		c.active[n] = true
		defer delete(c.active, n)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil || c.active[n.Alias] {
			return nil, &fileError{line: n.Line, msg: fmt.Sprintf("alias *%s refers to a value that contains it", n.Value)}
		}
		return c.value(n.Alias, depth, true)
	case yaml.ScalarNode:
		return scalar(n)
	case yaml.MappingNode:
		if tag := n.ShortTag(); tag != "!!map" {
			return nil, unsupportedTag(n, tag)
		}
		return c.mapping(n, depth, aliased)
	case yaml.SequenceNode:
		if tag := n.ShortTag(); tag != "!!seq" {
			return nil, unsupportedTag(n, tag)
		}
		arr := make([]any, 0, len(n.Content))
		for _, item := range n.Content {
			v, err := c.value(item, depth+1, aliased)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	}
	return nil, &fileError{line: n.Line, msg: "unexpected YAML node"}
}

// expand counts n, reached through an alias, against the alias limits.
func (c *yamlConverter) expand(n *yaml.Node) error {
	c.expanded++
	if n.Kind == yaml.ScalarNode {
		c.expandedText += len(n.Value)
	}
	switch {
	case c.expanded > maxAliasNodes:
		return &fileError{line: n.Line, msg: fmt.Sprintf("aliases expand to more than %d values", maxAliasNodes)}
	case c.expandedText > maxAliasText:
		return &fileError{line: n.Line, msg: fmt.Sprintf("aliases expand to more than %d MiB of text", maxAliasText>>20)}
	}
	return nil
}

// mapping converts a mapping. Merge keys ("<<: *base") add the keys the
// mapping does not set itself, the first merged mapping winning, as
// yaml.v3 does.
func (c *yamlConverter) mapping(n *yaml.Node, depth int, aliased bool) (any, error) {
	obj := make(map[string]any, len(n.Content)/2)
	lines := make(map[string]int, len(n.Content)/2)
	var merge *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		key, err := c.key(kn)
		if err != nil {
			return nil, err
		}
		if first, dup := lines[key]; dup {
			return nil, &fileError{line: kn.Line, msg: fmt.Sprintf("duplicate key %q (first at line %d)", key, first)}
		}
		lines[key] = kn.Line
		if kn.ShortTag() == "!!merge" {
			merge = vn
			continue
		}
		if obj[key], err = c.value(vn, depth+1, aliased); err != nil {
			return nil, err
		}
	}
	if merge == nil {
		return obj, nil
	}
	return obj, c.merge(obj, merge, depth, aliased)
}

// merge adds the keys of the mapping or mappings of a merge key's value
// that obj does not have yet.
func (c *yamlConverter) merge(obj map[string]any, n *yaml.Node, depth int, aliased bool) error {
	sources := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		sources = n.Content
	}
	for _, src := range sources {
		v, err := c.value(src, depth, aliased)
		if err != nil {
			return err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return &fileError{line: src.Line, msg: "a merge key (<<) needs a mapping or a sequence of mappings"}
		}
		for k, v := range m {
			if _, set := obj[k]; !set {
				obj[k] = v
			}
		}
	}
	return nil
}

// key reads a mapping key, which must be a string. A timestamp key stays
// the string it was written as, as timestamp values do.
func (c *yamlConverter) key(n *yaml.Node) (string, error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!str", "!!timestamp", "!!merge":
			return n.Value, nil
		}
		return "", &fileError{line: n.Line, msg: fmt.Sprintf("key %s is not a string: quote it", n.Value)}
	}
	return "", &fileError{line: n.Line, msg: "a key must be a string, not a mapping or sequence"}
}

// scalar converts a scalar by its resolved tag, using yaml.v3's own
// reading of numbers and booleans.
func scalar(n *yaml.Node) (any, error) {
	switch tag := n.ShortTag(); tag {
	case "!!str", "!!timestamp":
		return n.Value, nil
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, &fileError{line: n.Line, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
		}
		return b, nil
	case "!!int", "!!float":
		return number(n)
	default:
		return nil, unsupportedTag(n, tag)
	}
}

// number converts an !!int or !!float scalar to a json.Number.
func number(n *yaml.Node) (any, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, &fileError{line: n.Line, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	switch v := v.(type) {
	case int:
		return json.Number(strconv.Itoa(v)), nil
	case int64:
		return json.Number(strconv.FormatInt(v, 10)), nil
	case uint64:
		return json.Number(strconv.FormatUint(v, 10)), nil
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, &fileError{line: n.Line, msg: fmt.Sprintf("%s is not a finite number", n.Value)}
		}
		b, err := json.Marshal(v)
		return json.Number(b), err
	}
	return nil, &fileError{line: n.Line, msg: fmt.Sprintf("cannot read %q as a number", n.Value)}
}

func unsupportedTag(n *yaml.Node, tag string) error {
	return &fileError{line: n.Line, msg: fmt.Sprintf("unsupported YAML tag %s", tag)}
}
