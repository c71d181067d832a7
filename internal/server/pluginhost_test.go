package server

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/gated/gated/bus"
	"github.com/gated/gated/engine/wire"
	"github.com/gated/gated/plugins"
)

// TestToolsAreForwardedOverNATS runs the forwarder serve uses against a
// real NATS server: a fleet's tool service answers, fails, or is absent.
func TestToolsAreForwardedOverNATS(t *testing.T) {
	srv, err := bus.StartEmbedded(bus.EmbeddedConfig{Listen: "127.0.0.1:0", StoreDir: t.TempDir()}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()

	var got plugins.ToolRequest
	if _, err := nc.Subscribe(wire.ToolSubject("host_list_services"), func(m *nats.Msg) {
		_ = json.Unmarshal(m.Data, &got)
		_ = m.Respond([]byte(`{"services":["nginx"]}`))
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe(wire.ToolSubject("broken"), func(m *nats.Msg) {
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(wire.ToolErrorHeader, "inventory is down")
		_ = m.RespondMsg(reply)
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	forward := ToolConfig(nc, nil, time.Second).Forward
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req := plugins.ToolRequest{Tenant: "acme", ProposalID: "p1", ReviewID: "rv1", Tool: "host_list_services", Args: json.RawMessage(`{"host":"web-1"}`)}
	out, err := forward(ctx, "host_list_services", req)
	if err != nil || string(out) != `{"services":["nginx"]}` {
		t.Fatalf("answer %s, err %v", out, err)
	}
	if got.Tenant != "acme" || got.ReviewID != "rv1" || string(got.Args) != `{"host":"web-1"}` {
		t.Errorf("the tool service was sent %+v", got)
	}
	if _, err := forward(ctx, "broken", req); err == nil || !strings.Contains(err.Error(), "inventory is down") {
		t.Errorf("a failing tool: err = %v", err)
	}
	if _, err := forward(ctx, "absent", req); err == nil || !strings.Contains(err.Error(), "no service answers gated.tools.absent") {
		t.Errorf("an absent tool: err = %v", err)
	}
}
