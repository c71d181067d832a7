package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/gated/gated/internal/jsonscan"
)

// ErrMalformed is returned by CheckKeys for bytes that are not JSON. It
// checks keys of documents encoding/json has accepted already, so it does
// not say more than where the walk stopped.
var ErrMalformed = errors.New("unexpected end or byte")

// KeyError names a key CheckKeys refuses.
type KeyError struct {
	// Path is the key's path from the top: keys joined by dots, array
	// indexes as [i], e.g. "criteria[1].extra".
	Path string
	// Duplicate is true for a key that repeats within one object;
	// otherwise the key is not, byte for byte, a field of the schema.
	Duplicate bool
}

func (e *KeyError) Error() string {
	if e.Duplicate {
		return "key " + strconv.Quote(e.Path) + " appears more than once"
	}
	return "key " + strconv.Quote(e.Path) + " is not a field of the schema (field names are case-sensitive)"
}

// CheckKeys walks the whole document and reports the first key that
// repeats within one object, or that is not, byte for byte, a field of
// sc, as a *KeyError. encoding/json matches field names
// case-insensitively and keeps the last of duplicate keys, while other
// parsers are case-sensitive and may keep the first: without this pass,
// {"class":"destructive", "CLASS":"read"} would read as a read to gated
// and as destructive to a case-sensitive executor. data must have been
// decoded by encoding/json already, so nesting is bounded by its own depth
// limit; bytes that are not JSON end the walk with ErrMalformed (or the
// error of decoding a key written with escapes), never a panic. The walk
// reads the bytes once and allocates only to report a problem or to
// decode a key written with escapes.
func CheckKeys(data []byte, sc *Schema) error {
	k := keyScanner{data: data}
	k.space()
	if err := k.value(sc); err != nil {
		if k.problem != nil {
			return k.problem
		}
		return err
	}
	return nil
}

// Schema describes the keys an object may hold, as SchemaOf reads them
// from a Go type. A nil *Schema accepts any value (free-form objects,
// maps).
type Schema struct {
	fields map[string]*Schema
	items  *Schema // for arrays of objects
}

// freeForm accepts any value.
var freeForm *Schema

// SchemaOf derives the keys a JSON object of struct type t may hold from
// its json tags, nested structs and lists of structs included. Maps,
// times and scalars are free-form.
func SchemaOf(t reflect.Type) *Schema {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice {
			if items := SchemaOf(t.Elem()); items != nil {
				return &Schema{items: items}
			}
			return freeForm
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return freeForm
	}
	sc := &Schema{fields: map[string]*Schema{}}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		sc.fields[name] = SchemaOf(f.Type)
	}
	return sc
}

var errStopWalk = errors.New("stop")

// keyScanner walks JSON that encoding/json has accepted. It still checks
// every index it reads, so bytes that are not JSON end the walk with an
// error rather than a panic.
type keyScanner struct {
	data    []byte
	i       int
	path    []pathSeg // keys and [i] segments leading to the current value
	problem *KeyError
}

type pathSeg struct {
	key   string
	index int // an array index, or -1 for a key
}

func (k *keyScanner) space() { k.i = jsonscan.Space(k.data, k.i) }

// str reads a string at k.i and returns its bytes without the quotes;
// escaped reports a backslash inside.
func (k *keyScanner) str() (raw []byte, escaped bool, err error) {
	if k.i >= len(k.data) || k.data[k.i] != '"' {
		return nil, false, ErrMalformed
	}
	end := jsonscan.SkipString(k.data, k.i)
	if end < 0 {
		return nil, false, ErrMalformed
	}
	raw = k.data[k.i+1 : end-1]
	k.i = end
	return raw, bytes.IndexByte(raw, '\\') >= 0, nil
}

func (k *keyScanner) value(sc *Schema) error {
	if k.i >= len(k.data) {
		return ErrMalformed
	}
	switch k.data[k.i] {
	case '{':
		return k.object(sc)
	case '[':
		var item *Schema
		if sc != nil {
			item = sc.items
		}
		k.i++
		k.space()
		if k.i < len(k.data) && k.data[k.i] == ']' {
			k.i++
			return nil
		}
		for n := 0; ; n++ {
			k.space()
			k.path = append(k.path, pathSeg{index: n})
			err := k.value(item)
			k.path = k.path[:len(k.path)-1]
			if err != nil {
				return err
			}
			if done, err := k.next(']'); done || err != nil {
				return err
			}
		}
	case '"':
		_, _, err := k.str()
		return err
	}
	// A number, true, false or null: up to the next delimiter.
	start := k.i
	if k.i = jsonscan.SkipValue(k.data, start); k.i == start {
		return ErrMalformed
	}
	return nil
}

func (k *keyScanner) object(sc *Schema) error {
	k.i++
	k.space()
	if k.i < len(k.data) && k.data[k.i] == '}' {
		k.i++
		return nil
	}
	var seenBuf [16][]byte
	seen := seenBuf[:0]
	for {
		k.space()
		name, escaped, err := k.str()
		if err != nil {
			return err
		}
		if escaped {
			var decoded string
			quoted := k.data[k.i-len(name)-2 : k.i] // the key with its quotes
			if err := json.Unmarshal(quoted, &decoded); err != nil {
				return err
			}
			name = []byte(decoded)
		}
		for _, prev := range seen {
			if bytes.Equal(prev, name) {
				k.problem = &KeyError{Path: k.render(string(name)), Duplicate: true}
				return errStopWalk
			}
		}
		seen = append(seen, name)
		var child *Schema
		if sc != nil && sc.fields != nil {
			var known bool
			if child, known = sc.fields[string(name)]; !known {
				k.problem = &KeyError{Path: k.render(string(name))}
				return errStopWalk
			}
		}
		k.space()
		if k.i >= len(k.data) || k.data[k.i] != ':' {
			return ErrMalformed
		}
		k.i++
		k.space()
		k.path = append(k.path, pathSeg{key: string(name), index: -1})
		err = k.value(child)
		k.path = k.path[:len(k.path)-1]
		if err != nil {
			return err
		}
		if done, err := k.next('}'); done || err != nil {
			return err
		}
	}
}

// next reads what follows a member of an array or object: a comma (more
// to come) or the closing bracket (done).
func (k *keyScanner) next(closing byte) (done bool, err error) {
	k.space()
	if k.i >= len(k.data) {
		return false, ErrMalformed
	}
	k.i++
	switch k.data[k.i-1] {
	case ',':
		return false, nil
	case closing:
		return true, nil
	}
	return false, ErrMalformed
}

func (k *keyScanner) render(last string) string {
	var b strings.Builder
	for _, seg := range append(k.path, pathSeg{key: last, index: -1}) {
		switch {
		case seg.index >= 0:
			b.WriteString("[" + strconv.Itoa(seg.index) + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(seg.key)
		}
	}
	return b.String()
}
