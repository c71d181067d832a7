package policies

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gated/gated/engine"
)

// boomRule denies one action; tests swap its action to see which policy
// is in force.
func boomRule(action string) string {
	return `package gated

deny contains {"rule": "no_` + action + `", "message": "` + action + ` is refused"} if input.proposal.action == "` + action + `"
`
}

// boomTest passes only while the boom rule is in force. A user's tests
// cannot lean on the default bundle's test helpers: those tests are not
// part of a user build.
const boomTest = `package local_test

import data.gated

test_boom_denied if {
	p := {"id": "t1", "tenant": "acme", "action": "boom", "class": "write", "target": {}, "flags": {}}
	d := gated.decision with input as {"proposal": p, "persona": null, "history": [], "now_ns": 0}
	some entry in d.deny
	entry.rule == "no_boom"
}
`

// readTest passes whatever the boom rule says.
const readTest = `package local_test

import data.gated

test_listing_services_needs_no_review if {
	p := {"id": "t2", "tenant": "acme", "action": "host_list_services", "class": "read", "target": {}, "flags": {}}
	d := gated.decision with input as {"proposal": p, "persona": null, "history": [], "now_ns": 0}
	count(d.deny) == 0
	not d.review.required
}
`

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// deniedRules evaluates a write proposal for action with l.
func deniedRules(t *testing.T, l engine.Policy, action string) []string {
	t.Helper()
	p := writeProposal()
	p.Action = action
	d, err := l.Evaluate(t.Context(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, deny := range d.Denies {
		out = append(out, deny.Rule)
	}
	return out
}

func TestLiveReload(t *testing.T) {
	dir := t.TempDir()
	rule := filepath.Join(dir, "boom.rego")
	writeFile(t, rule, boomRule("boom"))
	writeFile(t, filepath.Join(dir, "read_test.rego"), readTest)
	var heard []Reload
	var mu sync.Mutex
	l, err := NewLive(t.Context(), Sources{Dir: dir}, func(r Reload) {
		mu.Lock()
		heard = append(heard, r)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	first := l.State()
	// The user's tests run, the default bundle's do not.
	if first.Stale || first.Tests != 1 || !slices.Contains(first.Files, rule) || !slices.Contains(first.Files, "default/gated.rego") {
		t.Fatalf("initial state %+v", first)
	}
	if !slices.Contains(deniedRules(t, l, "boom"), "no_boom") {
		t.Fatal("the user rule is not in force")
	}

	t.Run("a good change swaps in", func(t *testing.T) {
		writeFile(t, rule, boomRule("bang"))
		r := l.Reload(t.Context())
		if !r.OK || !r.Changed || r.Revision == first.Revision || r.Previous != first.Revision {
			t.Fatalf("reload %+v", r)
		}
		if slices.Contains(deniedRules(t, l, "boom"), "no_boom") || !slices.Contains(deniedRules(t, l, "bang"), "no_bang") {
			t.Fatal("the new rule is not in force")
		}
		if s := l.State(); s.Revision != r.Revision || s.Stale || l.Revision() != r.Revision {
			t.Fatalf("state %+v after a good reload", s)
		}
	})

	good := l.Revision()
	for _, bad := range []struct{ note, file, body, want string }{
		{"syntax error", "boom.rego", "package gated\n\ndeny contains x if {\n", "boom.rego:"},
		{"unknown builtin", "boom.rego", "package gated\n\ndeny contains {\"rule\": \"x\", \"message\": \"y\"} if no.such_builtin(input.proposal.action)\n", "boom.rego:3"},
		{"wrong decision shape", "boom.rego", "package gated\n\ndeny contains \"just a string\" if true\n", "decision.deny"},
		{"failing test", "boom_test.rego", boomTest, "test_boom_denied"},
		{"bad data", "data.yaml", "gated:\n  config:\n    target_cooldown: [\n", "data.yaml:"},
		{"data that fails the bundle's checks", "data.yaml", "gated:\n  config:\n    target_cooldown: soon\n", "target_cooldown"},
	} {
		t.Run("refused: "+bad.note, func(t *testing.T) {
			writeFile(t, rule, boomRule("bang"))
			_ = os.Remove(filepath.Join(dir, "boom_test.rego"))
			_ = os.Remove(filepath.Join(dir, "data.yaml"))
			writeFile(t, filepath.Join(dir, bad.file), bad.body)
			r := l.Reload(t.Context())
			if r.OK || r.Changed || !strings.Contains(r.Error, bad.want) {
				t.Fatalf("reload %+v, want a refusal mentioning %q", r, bad.want)
			}
			if l.Revision() != good || !slices.Contains(deniedRules(t, l, "bang"), "no_bang") {
				t.Fatal("a refused build replaced the running policy")
			}
			if s := l.State(); !s.Stale || s.LastReload == nil || s.LastReload.OK {
				t.Fatalf("state %+v after a refused reload", s)
			}
		})
	}

	t.Run("fixing the sources clears stale", func(t *testing.T) {
		_ = os.Remove(filepath.Join(dir, "boom_test.rego"))
		_ = os.Remove(filepath.Join(dir, "data.yaml"))
		writeFile(t, rule, boomRule("bang"))
		r := l.Reload(t.Context())
		if !r.OK || r.Changed || r.Revision != good {
			t.Fatalf("reload %+v, want OK and unchanged", r)
		}
		if s := l.State(); s.Stale || s.Failures != 6 || s.Reloads != 8 {
			t.Fatalf("state %+v", s)
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 8 {
		t.Fatalf("notify heard %d reloads, want 8", len(heard))
	}
}

func TestNewLiveRefusesABadPolicy(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "x.rego"), "package gated\n\ndecision := 1\n")
	_, err := NewLive(t.Context(), Sources{Dir: dir}, nil)
	if !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("err = %v, want ErrInvalidBundle", err)
	}
}

func TestLiveWatchReloadsOnChange(t *testing.T) {
	dir := t.TempDir()
	rule := filepath.Join(dir, "nested", "boom.rego")
	writeFile(t, rule, boomRule("boom"))
	reloads := make(chan Reload, 16)
	l, err := NewLive(t.Context(), Sources{Dir: dir}, func(r Reload) { reloads <- r })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- l.Watch(ctx, WatchOptions{Debounce: 20 * time.Millisecond, Poll: -1}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	next := func() Reload {
		select {
		case r := <-reloads:
			return r
		case <-time.After(20 * time.Second):
			t.Fatal("no reload after a change")
			return Reload{}
		}
	}
	// Let the watcher register its directories before the first change.
	time.Sleep(100 * time.Millisecond)
	writeFile(t, rule, boomRule("bang"))
	if r := next(); !r.OK || !r.Changed {
		t.Fatalf("reload %+v", r)
	}
	if !slices.Contains(deniedRules(t, l, "bang"), "no_bang") {
		t.Fatal("the watched change is not in force")
	}
	// A new directory with a new file is picked up too.
	writeFile(t, filepath.Join(dir, "more", "x.rego"), boomRule("zap"))
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(deniedRules(t, l, "zap"), "no_zap") {
		if time.Now().After(deadline) {
			t.Fatal("a file in a new directory was not picked up")
		}
		next()
	}
}

func TestLiveWatchPollCatchesMissedEvents(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(t.TempDir(), "config.json")
	writeFile(t, data, `{"gated": {"config": {"denied_actions": {"*": ["boom"]}}}}`)
	reloads := make(chan Reload, 16)
	l, err := NewLive(t.Context(), Sources{Dir: dir, DataFiles: []string{data}}, func(r Reload) { reloads <- r })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(deniedRules(t, l, "boom"), "denied_action") {
		t.Fatal("the data file is not in force")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = l.Watch(ctx, WatchOptions{Debounce: 10 * time.Millisecond, Poll: 50 * time.Millisecond}) }()
	time.Sleep(100 * time.Millisecond)
	writeFile(t, data, `{"gated": {"config": {"denied_actions": {"*": ["bang"]}}}}`)
	select {
	case r := <-reloads:
		if !r.OK || !r.Changed {
			t.Fatalf("reload %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no reload after the data file changed")
	}
	if !slices.Contains(deniedRules(t, l, "bang"), "denied_action") || slices.Contains(deniedRules(t, l, "boom"), "denied_action") {
		t.Fatal("the changed data is not in force")
	}
}

// TestLiveEvaluatesDuringReloads runs evaluations while reloads swap the
// policy: each evaluation sees one whole policy (the race detector
// watches the swap).
func TestLiveEvaluatesDuringReloads(t *testing.T) {
	dir := t.TempDir()
	rule := filepath.Join(dir, "boom.rego")
	writeFile(t, rule, boomRule("boom"))
	l, err := NewLive(t.Context(), Sources{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := writeProposal()
			p.Action = "boom"
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.Evaluate(context.Background(), engine.PolicyInput{Proposal: p, Persona: reviewerPersona})
				if err != nil {
					errs <- err
					return
				}
				if !strings.HasPrefix(d.Revision, "sha256:") {
					errs <- errors.New("decision without a revision")
					return
				}
			}
		}()
	}
	for i := range 3 {
		writeFile(t, rule, boomRule([]string{"bang", "boom", "zap"}[i]))
		if r := l.Reload(t.Context()); !r.OK {
			t.Fatal(r.Error)
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestNewCandidateSurvivesABadFirstBuild: a candidate whose sources do not
// compile is not fatal; it has no revision and fails every evaluation
// until a reload of good sources swaps a build in.
func TestNewCandidateSurvivesABadFirstBuild(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "boom.rego"), "package gated\n\ndeny contains x if {\n")
	var reloads []Reload
	l, err := NewCandidate(t.Context(), Sources{Dir: dir}, func(r Reload) { reloads = append(reloads, r) })
	if err == nil || !errors.Is(err, ErrInvalidBundle) {
		t.Fatalf("NewCandidate error %v, want one wrapping ErrInvalidBundle", err)
	}
	if l == nil {
		t.Fatal("NewCandidate returned no Live for a bad first build")
	}
	if rev := l.Revision(); rev != "" {
		t.Errorf("revision %q before any good build, want empty", rev)
	}
	if _, err := l.Evaluate(t.Context(), engine.PolicyInput{Proposal: writeProposal(), Persona: reviewerPersona}); !errors.Is(err, ErrNoGoodBuild) {
		t.Errorf("Evaluate error %v, want ErrNoGoodBuild", err)
	}
	if s := l.State(); !s.Stale || s.Failures != 1 || s.LastReload == nil || s.LastReload.Error == "" {
		t.Errorf("state %+v, want stale with one failure and its error", s)
	}
	writeFile(t, filepath.Join(dir, "boom.rego"), boomRule("boom"))
	if r := l.Reload(t.Context()); !r.OK || !r.Changed {
		t.Fatalf("reload of good sources: %+v", r)
	}
	if got := deniedRules(t, l, "boom"); !slices.Contains(got, "no_boom") {
		t.Errorf("denies after the good reload %v, want no_boom", got)
	}
	if len(reloads) != 1 || !reloads[0].OK {
		t.Errorf("notify heard %+v, want the one good reload", reloads)
	}
}
