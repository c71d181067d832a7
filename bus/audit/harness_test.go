package audit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine"
)

// gate is gated's intake running on an in-process server (the real
// worker, engine and default policy, no reviewer plugin) and a fleet
// client that proposes through it.
type gate struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	res    *bus.Resources
	client *fleet.Client
}

func startGate(t *testing.T, wrap func(bus.Decider) bus.Decider, cfg bus.Config) *gate {
	t.Helper()
	g := bustest.StartGated(t, wrap, cfg)
	client, err := fleet.NewClient(g.NC)
	if err != nil {
		t.Fatal(err)
	}
	return &gate{nc: g.NC, js: g.JS, res: g.Resources, client: client}
}

// proposal is a proposal of tenant acme on a target nginx; extra is
// spliced in as more members.
func proposal(id, class, action string, extra string) []byte {
	radius := ""
	if class != "read" {
		radius = `,"blast_radius":"single_device"`
	}
	return fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":"acme","action":%q,"class":%q,"target":{"service":"nginx"}%s%s}`,
		id, action, class, radius, extra)
}

func (g *gate) propose(t *testing.T, data []byte) *engine.Verdict {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := g.client.ProposeRaw(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
