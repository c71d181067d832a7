package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated/internal/natstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gated/gated"
	"github.com/gated/gated/bus"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/fleet"
	"github.com/gated/gated/engine/wire"
)

// startAuthCluster starts three routed nats-servers with JetStream in the
// test process, each accepting user gated with password, and waits until
// JetStream has a meta leader. It returns the client URLs.
func startAuthCluster(t *testing.T, password string) []string {
	t.Helper()
	routePorts := make([]int, 3)
	for i := range routePorts {
		routePorts[i] = natstest.FreePort(t)
	}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	var urls []string
	for i, p := range routePorts {
		s := startAuthServer(t, &server.Options{
			ServerName: fmt.Sprintf("r%d", i+1),
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Users:      []*server.User{{Username: "gated", Password: password}},
			Cluster:    server.ClusterOpts{Name: "gated-r3", Host: "127.0.0.1", Port: p},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		})
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.UserInfo("gated", password))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return urls
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeOnClusterFromConfig runs serve as an operator would against a
// three-node cluster: the servers, the user and the stream and bucket
// settings in a --config file, the password in GATED_NATS_PASSWORD. The
// streams and the bucket come out R3 with the configured ages, and a
// proposal is decided.
func TestServeOnClusterFromConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node NATS cluster")
	}
	clearGatedEnv(t)
	const password = "cluster-pw-7"
	urls := startAuthCluster(t, password)
	httpAddr := natstest.FreeAddr(t)
	cfg := writeFile(t, t.TempDir(), "gated.yaml", fmt.Sprintf(`
nats_url: %s
nats_user: gated
replicas: 3
verdict_ttl: 36h
audit_max_age: 720h
log_level: warn
log_format: json
http: %s
`, strings.Join(urls, ","), httpAddr))
	t.Setenv("GATED_NATS_PASSWORD", password)

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve", "--config", cfg, "--data-dir", t.TempDir()}) }()

	nc, err := nats.Connect(strings.Join(urls, ","), nats.UserInfo("gated", password))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, ok func(ctx context.Context) bool) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			good := ok(ctx)
			cancel()
			if good {
				return
			}
			select {
			case err := <-done:
				t.Fatalf("serve returned before %s: %v", what, err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s after 60s", what)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// The consumer is the last object serve sets up; the review service
	// answers once serve is ready.
	waitFor("consumer", func(ctx context.Context) bool {
		_, err := js.Consumer(ctx, bus.ProposalsStream, bus.ConsumerName)
		return err == nil
	})

	// serve is ready once every bucket it reads answers; on a loaded
	// machine the three nodes may still be electing their leaders.
	waitReady(t, "http://"+httpAddr+"/readyz", done)
	// A deadline generous for a loaded machine: the three nodes replicate
	// every write of the first proposal (its budget, audit and verdict),
	// and a write that times out is delivered again after ack_wait (30s).
	ctx2, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{bus.ProposalsStream, audit.Stream, "KV_" + wire.VerdictBucket} {
		s, err := js.Stream(ctx2, name)
		if err != nil {
			t.Fatal(err)
		}
		info := s.CachedInfo()
		if info.Config.Replicas != 3 {
			t.Errorf("%s has %d replicas, want 3 from the config file", name, info.Config.Replicas)
		}
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("%s cluster info %+v: want a leader and two replicas", name, info.Cluster)
		}
		switch name {
		case audit.Stream:
			if info.Config.MaxAge != 720*time.Hour {
				t.Errorf("%s max age %s, want 720h from audit_max_age", name, info.Config.MaxAge)
			}
		case "KV_" + wire.VerdictBucket:
			if info.Config.MaxAge != 36*time.Hour {
				t.Errorf("%s TTL %s, want 36h from verdict_ttl", name, info.Config.MaxAge)
			}
		}
	}

	client, err := fleet.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	v, err := client.ProposeRaw(ctx2, []byte(`{"v":1,"id":"r3-read-1","tenant":"acme","action":"host_list_services","class":"read",`+
		`"target":{"device_id":7},"reason":"r3 smoke","operator":{"id":"alice","roles":["sre"]},"requested_by":{"agent":"a","session":"s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if v.Outcome != gated.OutcomeApproved {
		t.Errorf("verdict %s at %s (%s), want approved", v.Outcome, v.Stage, v.Reason)
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
}

// The stream and bucket settings are keys of the config file like any
// flag; a bad value is refused before serve starts anything.
func TestServeStorageSettingsFromConfigErrors(t *testing.T) {
	clearGatedEnv(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		note, file, want string
	}{
		{note: "replicas out of range", file: "replicas: 7\nnats_url: nats://127.0.0.1:1\n", want: "--replicas 7 must be between 1 and 5"},
		{note: "replicas on the embedded server", file: "replicas: 3\n", want: "--replicas 3 needs a NATS cluster"},
		{note: "verdict ttl too short", file: "verdict_ttl: 30s\n", want: "--verdict-ttl 30s must be at least 1h5m0s"},
		{note: "verdict ttl shorter than a held action and its grant", file: "verdict_ttl: 2h\noperator_deadline: 2h\n", want: "--verdict-ttl 2h0m0s must be at least 2h5m0s"},
		{note: "negative audit age", file: "audit_max_age: -1h\n", want: "--audit-max-age must not be negative"},
		{note: "duplicate window too short", file: "duplicate_window: 500ms\n", want: "--duplicate-window 500ms must be from 1s to --verdict-ttl"},
		{note: "duplicate window past the verdict ttl", file: "verdict_ttl: 2h\nduplicate_window: 3h\n", want: "--duplicate-window 3h0m0s must be from 1s to --verdict-ttl (2h0m0s)"},
		{note: "not a duration", file: "verdict_ttl: 7\n", want: `verdict_ttl: invalid duration value "7"`},
	} {
		t.Run(tc.note, func(t *testing.T) {
			cfg := writeFile(t, dir, strings.ReplaceAll(tc.note, " ", "-")+".yaml", tc.file)
			code, _, err := runGated(t, "serve", "--config", cfg, "--data-dir", filepath.Join(dir, "data"), "--nats-listen", "127.0.0.1:0")
			if code != exitUsage || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("exit %d, %v; want %d and %q", code, err, exitUsage, tc.want)
			}
		})
	}
}
