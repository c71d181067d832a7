package engine_test

import (
	"slices"
	"testing"

	"github.com/gated/gated"
)

// wantLabels checks that a decoded proposal carries labels, in order.
func wantLabels(labels ...string) func(*testing.T, *gated.Proposal) {
	return func(t *testing.T, p *gated.Proposal) {
		t.Helper()
		if !slices.Equal(p.Labels, labels) {
			t.Errorf("labels = %q, want %q", p.Labels, labels)
		}
	}
}
