package strictjson

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// ErrFoldedKeys is the cause of a *FoldError: an object names two keys
// that differ only by case.
var ErrFoldedKeys = errors.New("keys differ only by case")

// FoldError names two keys of one object that are equal under Unicode
// simple case folding (strings.EqualFold) but not byte for byte.
type FoldError struct {
	// Path is the object's place in the value, as a JSON Pointer (RFC
	// 6901); "" is the value itself.
	Path string
	// Key and Other are the two keys, in byte order.
	Key, Other string
}

// Error names both keys and where they are.
func (e *FoldError) Error() string {
	where := "the object"
	if e.Path != "" {
		where = "the object at " + e.Path
	}
	return fmt.Sprintf("%s has members %s and %s, which differ only by case: a reader that matches names without case (Go's encoding/json does) could take either", where, strconv.Quote(e.Key), strconv.Quote(e.Other))
}

// Unwrap returns ErrFoldedKeys.
func (e *FoldError) Unwrap() error { return ErrFoldedKeys }

// CheckFolded walks v, a value as ReadValue or encoding/json give it
// (map[string]any, []any and scalars), and returns a *FoldError for the
// first object, in a walk with keys in byte order, that holds two keys
// equal under strings.EqualFold. Readers disagree on such an object:
// encoding/json decoding into a struct matches member names without
// case and keeps the last, a case-sensitive reader keeps each apart, so
// a value reviewed under one name could be acted on under the other.
func CheckFolded(v any) error {
	return checkFolded(v, "")
}

func checkFolded(v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		keys := slices.Sorted(maps.Keys(x))
		seen := make(map[string]string, len(keys))
		for _, k := range keys {
			f := foldKey(k)
			if other, dup := seen[f]; dup {
				return &FoldError{Path: path, Key: other, Other: k}
			}
			seen[f] = k
		}
		for _, k := range keys {
			if err := checkFolded(x[k], path+"/"+escapePointer(k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := checkFolded(e, path+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// foldKey maps s to one representative of its class under simple case
// folding: each rune becomes the smallest rune of its folding orbit, so
// two strings have the same key exactly when strings.EqualFold holds.
func foldKey(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			ascii = false
			break
		}
	}
	if ascii {
		// The least rune of an ASCII letter's orbit is its upper case.
		return strings.ToUpper(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// escapePointer escapes a key as a JSON Pointer token.
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
