package intake_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/bustest"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/bus/intake"
	"github.com/gated/gated/bus/store"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
)

// TestGrantCrashBeforePublish: when the verdict's publication fails after
// the verdict was stored, the proposal is redelivered and answered with
// the stored verdict: one grant, issued once, the one the fleet receives,
// and usable once.
func TestGrantCrashBeforePublish(t *testing.T) {
	for _, failing := range []string{"publish"} {
		t.Run(failing, func(t *testing.T) {
			s := bustest.Server(t)
			nc, js := bustest.Connect(t, s)
			res, err := bus.Setup(t.Context(), js, bus.Config{})
			if err != nil {
				t.Fatal(err)
			}
			aud := bustest.AuditWriter(t, js, audit.Config{})
			ring, err := grant.NewRing(time.Now().Add(-time.Minute), 5*time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			gs, err := grants.New(t.Context(), nc, js, res.Verdicts, grants.Config{Ring: ring, Trails: aud.Trail})
			if err != nil {
				t.Fatal(err)
			}
			if err := gs.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gs.Stop)
			eng := bustest.EngineWith(t, engine.Config{Policy: bustest.Policy(t), Router: bustest.NoPlugins{},
				Store: store.New(res.Verdicts), Grants: engine.GrantIssuer{Ring: gs.Ring, TTL: 5 * time.Minute}})
			w, err := intake.NewWorker(nc, js, res, eng, aud.Trail, bus.Config{}, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			var failed atomic.Bool
			intake.SetPublish(w, func(subject string, data []byte) error {
				if failing == "publish" && failed.CompareAndSwap(false, true) {
					return errors.New("crashed before publishing")
				}
				return nc.Publish(subject, data)
			})
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { w.Stop(5 * time.Second) })
			c, err := fleet.NewClient(nc)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			v, err := c.ProposeRaw(ctx, bustest.Proposal("p-crash", "read", "host_list_services", ""))
			if err != nil || v.Outcome != gated.OutcomeApproved || v.Grant == "" {
				t.Fatalf("verdict %+v, %v: want approved with a grant", v, err)
			}
			if !failed.Load() {
				t.Fatal("nothing failed")
			}
			stored, err := store.New(res.Verdicts).Get(t.Context(), "acme", "p-crash")
			if err != nil {
				t.Fatal(err)
			}
			claims, err := grant.Decode(stored.Grant, ring.Public(time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			if v.Grant != stored.Grant {
				t.Fatalf("the fleet's grant and the stored verdict's differ")
			}
			if r := gs.Use(t.Context(), "acme", v.Grant, "a"); !r.OK || r.GID != claims.GID {
				t.Fatalf("use: %+v", r)
			}
			if r := gs.Use(t.Context(), "acme", v.Grant, "b"); r.OK {
				t.Fatal("a second use succeeded")
			}
			if events := bustest.AuditEvents(t, res.Audit, "acme", "p-crash"); count(events, gated.EventGrantIssued) != 1 {
				t.Errorf("audit %v: want one grant.issued", events)
			}
		})
	}
}
