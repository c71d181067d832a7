// Command roundtrip measures the Go fleet client's policy-path round trip
// at concurrency 1: N proposals published one after another, each waited
// for until its verdict, half read proposals approved at policy (so each
// approval is confirmed against the stored verdict) and half refused at
// policy (skip_review). make bench-clients runs it beside the Python and
// TypeScript programs of the same contract against one gated.
//
// Environment: GATED_NATS_URL (default nats://127.0.0.1:4222), TENANT
// (default acme), N (default 2000), WARMUP (default 50). It prints one
// JSON line: {"lang":"go","n":…,"p50_ms":…,"p99_ms":…,"per_sec":…}.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/fleet"
)

// result is the one line the program prints.
type result struct {
	Lang   string  `json:"lang"`
	N      int     `json:"n"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	PerSec float64 `json:"per_sec"`
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envInt(name string, def int) (int, error) {
	v := env(name, strconv.Itoa(def))
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q: want a count", name, v)
	}
	return n, nil
}

// proposal is the i-th proposal of a run: a read approved at policy, or a
// write refused at policy, each on a target of its own (no dedupe).
func proposal(prefix, tenant string, i int) *gated.Proposal {
	p := &gated.Proposal{
		ID: fmt.Sprintf("%s-%d", prefix, i), Tenant: tenant, Reason: "bench",
		Target:      map[string]any{"host": fmt.Sprintf("%s-h%d", prefix, i)},
		RequestedBy: &gated.RequestedBy{Agent: "bench"},
	}
	if i%2 == 0 {
		p.Action, p.Class = "host_list_services", gated.ClassRead
	} else {
		p.Action, p.Class, p.BlastRadius = "host_restart_service", gated.ClassWrite, gated.BlastSingleDevice
		p.Flags.SkipReview = true
	}
	return p
}

func run() error {
	n, err := envInt("N", 2000)
	if err != nil {
		return err
	}
	warmup, err := envInt("WARMUP", 50)
	if err != nil {
		return err
	}
	tenant := env("TENANT", "acme")
	nc, err := nats.Connect(env("GATED_NATS_URL", "nats://127.0.0.1:4222"))
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer nc.Close()
	c, err := fleet.NewClient(nc)
	if err != nil {
		return err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "bench-go-" + hex.EncodeToString(b[:])
	ctx := context.Background()
	lat := make([]float64, 0, n)
	var total time.Duration
	for i := range warmup + n {
		p := proposal(prefix, tenant, i)
		start := time.Now()
		v, err := c.Propose(ctx, p)
		took := time.Since(start)
		if v == nil || (err != nil && !errors.Is(err, fleet.ErrReviewRejected)) {
			return fmt.Errorf("proposal %s: %v", p.ID, err)
		}
		if i >= warmup {
			lat = append(lat, float64(took.Microseconds())/1000)
			total += took
		}
	}
	slices.Sort(lat)
	r := result{Lang: "go", N: n}
	if n > 0 {
		r.P50MS, r.P99MS = lat[n/2], lat[min(n-1, n*99/100)]
		r.PerSec = float64(n) / total.Seconds()
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "roundtrip:", err)
		os.Exit(1)
	}
}
