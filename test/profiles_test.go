package test

import (
	"net/http"
	"strings"
	"testing"
)

// --pprof serves Go's profiles beside /metrics; without it the path is
// not there at all.
func TestServeProfiles(t *testing.T) {
	plain := startGated(t)
	if code, _ := httpGet(t, plain, "/debug/pprof/goroutine?debug=1"); code != http.StatusNotFound {
		t.Fatalf("without --pprof: status %d, want 404", code)
	}

	g := startGated(t, "--pprof")
	code, body := httpGet(t, g, "/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("with --pprof: status %d, body %.200q", code, body)
	}
	if !strings.Contains(body, "(*Worker).handleAll") && !strings.Contains(body, "(*Worker).keepAlive") {
		t.Fatalf("the goroutine profile shows no worker goroutine:\n%.2000s", body)
	}
	if code, _ := httpGet(t, g, "/debug/pprof/heap"); code != http.StatusOK {
		t.Fatalf("heap profile: status %d", code)
	}
}
