package intake_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/engine"
)

// floodGate holds every delivery of tenant flood until it is opened, and
// decides the others at once: a tenant whose reviews all wait.
type floodGate struct {
	next    intake.Decider
	arrived chan string
	open    chan struct{}
}

func (g *floodGate) Decide(ctx context.Context, d engine.Delivery) (*gated.Verdict, error) {
	if strings.HasPrefix(d.Subject, "gated.proposals.flood.") {
		g.arrived <- d.MsgID
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.next.Decide(ctx, d)
}

func (g *floodGate) GiveUp(ctx context.Context, d engine.Delivery, cause error) *gated.Verdict {
	return g.next.GiveUp(ctx, d, cause)
}

// TestFloodingTenantLeavesHandlersToOthers: a tenant whose proposals all
// wait (a flood at its review limit, a slow reviewer) holds at most
// TenantMaxInFlight of the worker's handlers, so another tenant's
// proposal is decided while the flood waits, not after it.
func TestFloodingTenantLeavesHandlersToOthers(t *testing.T) {
	gate := &floodGate{arrived: make(chan string, 64), open: make(chan struct{})}
	g := bustest.StartGated(t, func(d intake.Decider) intake.Decider { gate.next = d; return gate },
		bus.Config{MaxInFlight: 4, TenantMaxInFlight: 2})
	defer close(gate.open)
	for i := range 8 {
		publish(t, g, "flood", fmt.Sprintf("f%d", i))
	}
	// The flood's proposals reached the handlers it may have.
	for range 2 {
		select {
		case <-gate.arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the flood's proposals were not handed out")
		}
	}
	sub, err := g.NC.SubscribeSync("gated.verdicts.quiet.q1")
	if err != nil {
		t.Fatal(err)
	}
	publish(t, g, "quiet", "q1")
	msg, err := sub.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatalf("the quiet tenant's proposal was not decided while the flood waited: %v", err)
	}
	if !strings.Contains(string(msg.Data), `"proposal_id":"q1"`) {
		t.Fatalf("verdict %s", msg.Data)
	}
	// The flood holds no more handlers than its share.
	select {
	case id := <-gate.arrived:
		t.Fatalf("flood proposal %s was handed a handler beyond the tenant's share", id)
	default:
	}
}

func publish(t *testing.T, g *bustest.Gated, tenant, id string) {
	t.Helper()
	data := fmt.Appendf(nil, `{"v":1,"id":%q,"tenant":%q,"action":"host_list_services","class":"read","target":{"service":"nginx"}}`, id, tenant)
	msg := nats.NewMsg("gated.proposals." + tenant + ".host_list_services")
	msg.Data = data
	msg.Header.Set("Nats-Msg-Id", tenant+"."+id)
	if _, err := g.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
}
