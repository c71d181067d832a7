package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// doc is a schema with the shapes CheckKeys must follow: nested objects,
// lists of objects, pointers, free-form maps, times, skipped fields and a
// field without a tag.
type doc struct {
	V        int            `json:"v"`
	ID       string         `json:"id"`
	Tenant   string         `json:"tenant"`
	Class    string         `json:"class"`
	Target   map[string]any `json:"target"`
	Flags    docFlags       `json:"flags"`
	Criteria []docCriterion `json:"criteria"`
	Run      *docRun        `json:"run"`
	At       time.Time      `json:"at"`
	Skipped  string         `json:"-"`
	Untagged string
}

type docFlags struct {
	SkipReview bool `json:"skip_review"`
}

type docCriterion struct {
	ID   string `json:"id"`
	Kind string `json:"kind,omitempty"`
}

type docRun struct {
	PriorReviews []struct {
		Findings []struct {
			ID   string `json:"id"`
			Body string `json:"body"`
		} `json:"findings"`
	} `json:"prior_reviews"`
}

var docSchema = SchemaOf(reflect.TypeFor[doc]())

// checkKeysByTokens is the key walk done with encoding/json's tokens: the
// reference CheckKeys is fuzzed against.
func checkKeysByTokens(data []byte, sc *Schema) error {
	k := keyChecker{dec: json.NewDecoder(bytes.NewReader(data))}
	k.dec.UseNumber()
	if err := k.value(sc); err != nil {
		if k.problem != nil {
			return k.problem
		}
		return err
	}
	return nil
}

type keyChecker struct {
	dec     *json.Decoder
	path    []string // keys and [i] segments leading to the current value
	problem *KeyError
}

func (k *keyChecker) value(sc *Schema) error {
	tok, err := k.dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var keys map[string]struct{}
		for k.dec.More() {
			kt, err := k.dec.Token()
			if err != nil {
				return err
			}
			name, _ := kt.(string)
			if _, dup := keys[name]; dup {
				k.problem = &KeyError{Path: k.render(name), Duplicate: true}
				return errStopWalk
			}
			var child *Schema
			if sc != nil && sc.fields != nil {
				var known bool
				if child, known = sc.fields[name]; !known {
					k.problem = &KeyError{Path: k.render(name)}
					return errStopWalk
				}
			}
			if keys == nil {
				keys = make(map[string]struct{}, 8)
			}
			keys[name] = struct{}{}
			k.path = append(k.path, name)
			err = k.value(child)
			k.path = k.path[:len(k.path)-1]
			if err != nil {
				return err
			}
		}
		_, err = k.dec.Token()
		return err
	case json.Delim('['):
		var item *Schema
		if sc != nil {
			item = sc.items
		}
		for i := 0; k.dec.More(); i++ {
			k.path = append(k.path, "\x00["+strconv.Itoa(i)+"]")
			err := k.value(item)
			k.path = k.path[:len(k.path)-1]
			if err != nil {
				return err
			}
		}
		_, err = k.dec.Token()
		return err
	}
	return nil
}

func (k *keyChecker) render(last string) string {
	var b strings.Builder
	for _, seg := range append(k.path, last) {
		if index, ok := strings.CutPrefix(seg, "\x00"); ok {
			b.WriteString(index)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(seg)
	}
	return b.String()
}

func TestCheckKeys(t *testing.T) {
	for _, tc := range []struct {
		note string
		in   string
		want *KeyError // nil means accepted
	}{
		{note: "known keys", in: `{"v":1,"id":"a","target":{"X":1,"x":2},"flags":{"skip_review":true},"Untagged":"u","at":"2026-01-01T00:00:00Z"}`},
		{note: "empty object", in: `{}`},
		{note: "not an object", in: `[1,2]`},
		{note: "unknown top-level key", in: `{"v":1,"extra":true}`, want: &KeyError{Path: "extra"}},
		{note: "case differs", in: `{"class":"write","CLASS":"read"}`, want: &KeyError{Path: "CLASS"}},
		{note: "skipped field", in: `{"Skipped":"x"}`, want: &KeyError{Path: "Skipped"}},
		{note: "duplicate", in: `{"id":"a","id":"b"}`, want: &KeyError{Path: "id", Duplicate: true}},
		{note: "duplicate written with an escape", in: `{"\u0063lass":"read","class":"write"}`, want: &KeyError{Path: "class", Duplicate: true}},
		{note: "duplicate in a free-form object", in: `{"target":{"a":1,"a":2}}`, want: &KeyError{Path: "target.a", Duplicate: true}},
		{note: "nested unknown", in: `{"flags":{"skip_review":true,"force":true}}`, want: &KeyError{Path: "flags.force"}},
		{note: "unknown in a list item", in: `{"criteria":[{"id":"a"},{"id":"b","extra":1}]}`, want: &KeyError{Path: "criteria[1].extra"}},
		{note: "deep list", in: `{"run":{"prior_reviews":[{"findings":[{"id":"f","bogus":true}]}]}}`, want: &KeyError{Path: "run.prior_reviews[0].findings[0].bogus"}},
	} {
		t.Run(tc.note, func(t *testing.T) {
			err := CheckKeys([]byte(tc.in), docSchema)
			var got *KeyError
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("CheckKeys = %v, want a *KeyError or nil", err)
			}
			if (got == nil) != (tc.want == nil) || got != nil && *got != *tc.want {
				t.Fatalf("CheckKeys = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestCheckKeysMalformed(t *testing.T) {
	for _, in := range []string{`{"a"`, `{"a":}`, `{"a" 1}`, `[1,`, `{"a":1,}`, `"open`} {
		t.Run(in, func(t *testing.T) {
			err := CheckKeys([]byte(in), nil)
			var ke *KeyError
			if err == nil || errors.As(err, &ke) {
				t.Fatalf("CheckKeys(%q) = %v, want an error that is no *KeyError", in, err)
			}
		})
	}
}

// FuzzCheckKeys: on every document encoding/json accepts (valid UTF-8),
// the byte walk reports what the token walk reports; on any other bytes
// it does not panic.
func FuzzCheckKeys(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"id":"a","target":{"x":[1,{"y":2}],"x2":null}}`,
		`{"class":"write","CLASS":"read"}`,
		`{"flags":{"skip_review":true,"skip_review":false}}`,
		`{"criteria":[{"id":"a"},{"id":"b","kind":"manual","extra":1}]}`,
		`{"run":{"prior_reviews":[{"findings":[{"id":"f","body":"b","bogus":true}]}]}}`,
		`{"\u0063lass":"read","class":"write"}`,
		`{"target":{"a\"b":1,"a\"b":2}}`,
		` { "v" : 1 , "tenant" : "t\\" } `,
		`{}`, `[]`, `"x"`, `12`, `{"target":{}}`, `{"target":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := CheckKeys(data, docSchema)
		if !utf8.Valid(data) || !json.Valid(data) {
			return
		}
		want := checkKeysByTokens(data, docSchema)
		var g, w *KeyError
		errors.As(got, &g)
		errors.As(want, &w)
		if (got == nil) != (want == nil) || (g == nil) != (w == nil) || g != nil && *g != *w {
			t.Fatalf("%q: byte walk %v, token walk %v", data, got, want)
		}
	})
}
