package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrDuplicateKey is the cause of a *ValueError for an object that names
// one key twice: encoding/json keeps the last, which hides the first.
var ErrDuplicateKey = errors.New("duplicate key")

// ErrTooDeep is the cause of a *ValueError for objects and arrays nested
// deeper than ValueOptions.MaxDepth.
var ErrTooDeep = errors.New("nested too deeply")

// ValueError is an error of ReadValue at a token of its input.
type ValueError struct {
	// Offset is the byte offset of the token at fault: the second key of
	// a duplicate, the bracket or brace that nests too deeply, the number
	// refused.
	Offset int64
	// Key and First are the duplicated key and the offset of its first
	// occurrence, for ErrDuplicateKey.
	Key   string
	First int64
	// Err is ErrDuplicateKey, ErrTooDeep or the error of
	// ValueOptions.Number.
	Err error
}

func (e *ValueError) Error() string {
	if errors.Is(e.Err, ErrDuplicateKey) {
		return fmt.Sprintf("duplicate key %q", e.Key)
	}
	return e.Err.Error()
}

func (e *ValueError) Unwrap() error { return e.Err }

// ValueOptions are ReadValue's checks beyond JSON's grammar.
type ValueOptions struct {
	// MaxDepth is how deeply objects and arrays may nest; 0 is no limit.
	MaxDepth int
	// Number, when set, checks every number; its error is returned as
	// the Err of a *ValueError at that number.
	Number func(json.Number) error
}

// ReadValue reads the one JSON value data holds, with white space around
// it, into what encoding/json gives an interface{} with UseNumber:
// map[string]any, []any, string, json.Number, bool or nil. Unlike
// encoding/json it refuses an object that names a key twice. Errors are a
// *ValueError for what o and duplicate keys refuse, and encoding/json's
// *json.SyntaxError, unwrapped, for input that is not one JSON value (an
// empty one included).
func ReadValue(data []byte, o ValueOptions) (any, error) {
	if !json.Valid(data) {
		// Unmarshal's syntax errors carry an offset from the start of the
		// input, which the Decoder's Token method does not promise.
		err := json.Unmarshal(data, new(json.RawMessage))
		if err == nil {
			err = &json.SyntaxError{Offset: int64(len(data))}
		}
		return nil, err
	}
	r := &valueReader{raw: data, dec: json.NewDecoder(bytes.NewReader(data)), o: o}
	r.dec.UseNumber()
	return r.value(0)
}

// valueReader builds a value from the tokens of valid JSON, checking keys.
type valueReader struct {
	raw []byte
	dec *json.Decoder
	o   ValueOptions
}

// value reads the next value, inside depth objects and arrays.
func (r *valueReader) value(depth int) (any, error) {
	off := r.next()
	tok, err := r.dec.Token()
	if err != nil {
		return nil, err
	}
	if _, ok := tok.(json.Delim); ok && r.o.MaxDepth > 0 && depth >= r.o.MaxDepth {
		return nil, &ValueError{Offset: off, Err: ErrTooDeep}
	}
	switch tok {
	case json.Delim('{'):
		return r.object(depth)
	case json.Delim('['):
		return r.array(depth)
	}
	if n, ok := tok.(json.Number); ok && r.o.Number != nil {
		if err := r.o.Number(n); err != nil {
			return nil, &ValueError{Offset: off, Err: err}
		}
	}
	return tok, nil // string, json.Number, bool or nil
}

func (r *valueReader) object(depth int) (any, error) {
	obj := map[string]any{}
	at := map[string]int64{}
	for r.dec.More() {
		off := r.next()
		tok, err := r.dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		if first, dup := at[key]; dup {
			return nil, &ValueError{Offset: off, Key: key, First: first, Err: ErrDuplicateKey}
		}
		at[key] = off
		if obj[key], err = r.value(depth + 1); err != nil {
			return nil, err
		}
	}
	return obj, r.end()
}

func (r *valueReader) array(depth int) (any, error) {
	arr := []any{}
	for r.dec.More() {
		v, err := r.value(depth + 1)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
	}
	return arr, r.end()
}

// end reads the closing delimiter of an object or array.
func (r *valueReader) end() error {
	_, err := r.dec.Token()
	return err
}

// next is the offset of the next token, past white space and the comma or
// colon before it, which the Decoder consumes only with that token.
func (r *valueReader) next() int64 {
	off := r.dec.InputOffset()
	separated := false
	for ; off < int64(len(r.raw)); off++ {
		switch c := r.raw[off]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		case (c == ',' || c == ':') && !separated:
			separated = true
		default:
			return off
		}
	}
	return off
}
