package server

import (
	"strings"
	"testing"
)

// TestBudgetsFileSettles: the watcher takes a change up only once two
// polls in a row read it the same, so neither the empty file between a
// truncation and its write nor half a file is ever parsed.
func TestBudgetsFileSettles(t *testing.T) {
	full := []byte("tenants:\n  acme: {agent: {reads: 2/1h}}\n  beta: {agent: {reads: 5/1h}}\n")
	half := full[:len("tenants:\n  acme: {agent: {reads: 2/1h}}\n")]
	f := budgetsFile{last: []byte("tenants: {}\n")}
	steps := []struct {
		read []byte
		want bool
	}{
		{[]byte("tenants: {}\n"), false}, // unchanged
		{[]byte{}, false},                // truncated
		{half, false},                    // half written: a valid file on its own
		{full, false},                    // written, read once
		{full, true},                     // read twice the same: taken up
		{full, false},                    // and not again
		{[]byte{}, false},                // truncated again
		{[]byte{}, true},                 // and left empty: taken up (and refused by the parse)
	}
	for i, s := range steps {
		if got := f.settled(s.read); got != s.want {
			t.Fatalf("poll %d read %q: settled %v, want %v", i, s.read, got, s.want)
		}
	}
	if !f.gone() {
		t.Error("a failed read after a file was read must be said")
	}
	if f.gone() {
		t.Error("a second failed read must not be said again")
	}
	if f.settled(full) || !f.settled(full) {
		t.Error("after a failed read, the file back must settle over two polls")
	}
	if _, err := parseReloadedBudgets("b.yaml", []byte(" \n\t\n")); err == nil || !strings.Contains(err.Error(), "b.yaml is empty") {
		t.Errorf("a blank file read again: %v, want refused as empty", err)
	}
	if cfg, err := parseReloadedBudgets("b.yaml", []byte("tenants: {}\n")); err != nil || cfg == nil {
		t.Errorf("tenants: {}: %v, want the defaults", err)
	}
}
