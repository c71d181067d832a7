package fleet

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecodeGrantUseReply holds the decoder of gated's answer to a use to
// one reading: it never panics, and what it accepts is one JSON object of
// ok, gid and error, each once and spelled exactly, read as encoding/json
// reads them; so no reply reads as a refusal to one reader and as ok to
// this one.
func FuzzDecodeGrantUseReply(f *testing.F) {
	for _, s := range []string{
		`{"ok":true,"gid":"AAECAwQFBgcICQoLDA0ODw"}`, `{"ok":false,"error":"already used"}`,
		`{"ok":false,"ok":true}`, `{"ok":false,"OK":true}`, `{"ok":false,"\u006fk":true}`, `{"ok":null}`,
		`{"gid":"x"}`, `{"ok":true}{}`, `[]`, `{"ok":1}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodeGrantUseReply(data)
		if err != nil {
			return
		}
		// The members as the tokenizer reads them, repeats included.
		dec := json.NewDecoder(bytes.NewReader(data))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Fatalf("accepted %q, which is not a JSON object", data)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Fatalf("accepted %q: %v", data, err)
			}
			k := tok.(string)
			if seen[k] || k != "ok" && k != "gid" && k != "error" {
				t.Fatalf("accepted %q with member %q", data, k)
			}
			seen[k] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				t.Fatalf("accepted %q: %v", data, err)
			}
		}
		if !seen["ok"] {
			t.Fatalf("accepted %q without ok", data)
		}
		var want grantUseReply
		if err := json.Unmarshal(data, &want); err != nil || want != r {
			t.Fatalf("accepted %q as %+v; encoding/json reads %+v (%v)", data, r, want, err)
		}
	})
}
