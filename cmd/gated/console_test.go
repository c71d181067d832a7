package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nkeys"

	"github.com/gated/gated/bus/operator"
	"github.com/gated/gated/console"
)

// TestServeMountsTheConsole: serve with --operators and --http serves the
// web console under /, beside /readyz; an operator of the file signs in
// with a signed challenge and reads the system page (the plugins and the
// policy serve runs); serve stops with a live feed open.
func TestServeMountsTheConsole(t *testing.T) {
	clearGatedEnv(t)
	s := natstest.Server(t)
	dir := t.TempDir()
	seedFile := filepath.Join(dir, "alice.seed")
	pub, err := operator.WriteSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	ops := writeFile(t, dir, "operators.yaml", "operators:\n  - id: alice\n    key: "+pub+"\n    tenants: [acme]\n")
	addr := freeTCPAddr(t)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--nats-url", s.ClientURL(), "--data-dir", t.TempDir(), "--operators", ops, "--http", addr,
			"--log-level", "error", "--log-format", "json"})
	}()
	base := "http://" + addr
	waitReady(t, base+"/readyz", done)

	res, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), `src="/assets/app.js"`) || res.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("GET /: %d %q\n%s", res.StatusCode, res.Header, body)
	}
	hc, get := consoleSession(t, base, seedFile)
	if res, _ := get("/readyz"); res.StatusCode != http.StatusOK {
		t.Fatalf("/readyz %d beside the console", res.StatusCode)
	}
	var me console.Me
	if _, body = get("/api/me"); json.Unmarshal(body, &me) != nil || !me.SignedIn || me.Operator != "alice" {
		t.Fatalf("/api/me %s", body)
	}
	var sys struct {
		Plugins []struct {
			Name    string `json:"name"`
			Running bool   `json:"running"`
		} `json:"plugins"`
		Policy struct {
			Revision string `json:"revision"`
		} `json:"policy"`
	}
	if _, body = get("/api/system"); json.Unmarshal(body, &sys) != nil || sys.Policy.Revision == "" || len(sys.Plugins) == 0 {
		t.Fatalf("/api/system %s", body)
	}

	// A live feed stays open while serve stops.
	feedReq, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+"/api/feed", nil)
	feed, err := (&http.Client{Jar: hc.Jar}).Do(feedReq)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Body.Close()
	if feed.StatusCode != http.StatusOK {
		t.Fatalf("feed %d", feed.StatusCode)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not stop within 60s")
	}
	// The console ended the feed rather than leaving it to the listener's
	// shutdown timeout.
	if _, err := io.ReadAll(feed.Body); err != nil {
		t.Fatalf("the feed did not end cleanly: %v", err)
	}
}

// consoleSession signs in to the console of serve at base with the
// operator seed of seedFile, as a browser does (a signed challenge), and
// returns the client holding the session and a GET through it.
func consoleSession(t *testing.T, base, seedFile string) (*http.Client, func(path string) (*http.Response, []byte)) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Jar: jar, Timeout: 20 * time.Second}
	get := func(path string) (*http.Response, []byte) {
		t.Helper()
		res, err := hc.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, body
	}
	var ch struct{ Challenge, Prefix string }
	if _, body := get("/api/challenge"); json.Unmarshal(body, &ch) != nil {
		t.Fatalf("/api/challenge %s", body)
	}
	seed, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(seed)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	sig, err := kp.Sign([]byte(ch.Prefix + ch.Challenge))
	if err != nil {
		t.Fatal(err)
	}
	signIn, _ := json.Marshal(map[string]string{"key": pub, "challenge": ch.Challenge, "sig": base64.RawURLEncoding.EncodeToString(sig)})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/api/signin", strings.NewReader(string(signIn)))
	req.Header.Set("Origin", base)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("sign-in: %d", res.StatusCode)
	}
	return hc, get
}
