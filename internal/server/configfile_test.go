package server

import (
	"strings"
	"testing"

	"github.com/gated/gated/internal/digest"
)

func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("nats_url: x\nplugins:\n  - {name: a, path: x, sha256: " + strings.Repeat("0", 64) + ", env: {A: 1}}\n"))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Add([]byte("- 1\n"))
	f.Add([]byte("plugins: [{env: [A=1]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, values, err := parseConfig("fuzz.yaml", data)
		if err != nil {
			return
		}
		for _, v := range values {
			if v.flag == "" || (!v.list && len(v.values) != 1) {
				t.Fatalf("value %+v", v)
			}
		}
		for _, s := range cfg.Plugins {
			if s.Name == "" || s.Path == "" || !digest.ValidSHA256(s.SHA256) {
				t.Fatalf("plugin %+v passed without name, path or digest", s)
			}
		}
	})
}
