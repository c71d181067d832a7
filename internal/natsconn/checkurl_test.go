package natsconn

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		servers string
		ok      bool
	}{
		{servers: "nats://127.0.0.1:4222", ok: true},
		{servers: "127.0.0.1:4222", ok: true},
		{servers: "tls://a:4222, ws://b:8080,wss://c", ok: true},
		{servers: "NATS://a:4222", ok: true},
		{servers: "nats://u:p@a:4222", ok: true},
		{servers: "http://127.0.0.1:8080"},
		{servers: "nats://a:4222,https://b"},
		{servers: "localhost:4222,ftp://x"},
		{servers: "nats://a b:4222"},
	} {
		err := CheckURL(tc.servers)
		var ue *UsageError
		if (err == nil) != tc.ok || err != nil && !errors.As(err, &ue) {
			t.Errorf("CheckURL(%q) = %v, want ok %v (a *UsageError otherwise)", tc.servers, err, tc.ok)
		}
	}
}

// FuzzCheckURL holds CheckURL to a reading of its rule of its own: a list
// is accepted exactly when every URL in it either has no "://" (nats.go
// takes it as nats://) or parses, with what comes before its first colon,
// in any case, one of the schemes nats.go speaks NATS over; a refusal
// never shows a URL's password.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{"nats://127.0.0.1:4222", "http://x", "a:1,tls://b", "nats://u:secret@h:1,http://v:secret@w", "Ws://x", "://", "nats:/x", "nAts:://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, servers string) {
		want := true
		for _, s := range strings.Split(servers, ",") {
			s = strings.TrimSpace(s)
			if !strings.Contains(s, "://") {
				continue
			}
			scheme, _, _ := strings.Cut(s, ":")
			u, err := url.Parse(s)
			if err != nil || !slices.Contains([]string{"nats", "tls", "ws", "wss"}, strings.ToLower(scheme)) || u.Scheme != strings.ToLower(scheme) {
				want = false
			}
		}
		err := CheckURL(servers)
		if (err == nil) != want {
			t.Fatalf("CheckURL(%q) = %v, want accepted %v", servers, err, want)
		}
		if err != nil && strings.Contains(servers, "secret@") && strings.Contains(err.Error(), "secret") && !strings.Contains(RedactURL(servers), "secret") {
			t.Fatalf("CheckURL(%q) shows a password: %v", servers, err)
		}
	})
}
