package engine

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// checkKeysByTokens is the key walk done with encoding/json's tokens: the
// reference checkKeys is fuzzed against.
func checkKeysByTokens(data []byte) *FieldError {
	k := keyChecker{dec: json.NewDecoder(bytes.NewReader(data))}
	k.dec.UseNumber()
	if err := k.value(proposalSchema); err != nil {
		if k.problem != nil {
			return k.problem
		}
		return fieldErr("", "proposal is not valid JSON: %v", err)
	}
	return nil
}

type keyChecker struct {
	dec     *json.Decoder
	path    []string // keys and [i] segments leading to the current value
	problem *FieldError
}

func (k *keyChecker) value(sc *schema) error {
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
				k.problem = fieldErr(k.render(name), "appears more than once; every key must be unique")
				return errStopWalk
			}
			var child *schema
			if sc != nil && sc.fields != nil {
				var known bool
				if child, known = sc.fields[name]; !known {
					k.problem = fieldErr(k.render(name), "is not a field of the v1 proposal schema (field names are case-sensitive)")
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
		var item *schema
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

// FuzzCheckKeys: on every document DecodeProposal hands to checkKeys
// (valid UTF-8 that encoding/json accepts), the byte walk reports what the
// token walk reports.
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
		if !utf8.Valid(data) || !json.Valid(data) {
			return
		}
		got, want := checkKeys(data), checkKeysByTokens(data)
		if (got == nil) != (want == nil) || (got != nil && got.Error() != want.Error()) {
			t.Fatalf("%q: byte walk %v, token walk %v", data, got, want)
		}
	})
}
