package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"github.com/gated/gated/engine/wire"
)

// grantKeyFile is the name of the grant key file gated creates in
// --data-dir when no --grant-key-file is given.
const grantKeyFile = "grant.keys"

// DefaultGrantTTL is how long a grant lives unless --grant-ttl says.
const DefaultGrantTTL = 5 * time.Minute

// DefaultRotateGrace is how long after `gated grants rotate` the old key
// may still sign: every gated reads its key file at least this often.
const DefaultRotateGrace = 30 * time.Second

// grantKeyPoll is how often serve reads its key file for a rotation.
const grantKeyPoll = 5 * time.Second

// grantKeyPath is the key file of serve and of `grants rotate`.
func grantKeyPath(keyFile, dataDir string) string {
	if keyFile != "" {
		return keyFile
	}
	return filepath.Join(dataDir, grantKeyFile)
}

// readGrantRing reads a key file.
func readGrantRing(path string) (*grant.Ring, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	ring, err := grant.ParseRing(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return ring, data, nil
}

// ensureGrantRing reads the key file at path, creating it with one new
// key (grants up to ttl) when create is set and there is none.
func ensureGrantRing(path string, ttl time.Duration, create bool) (ring *grant.Ring, data []byte, created bool, err error) {
	ring, data, err = readGrantRing(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) || !create {
		return ring, data, false, err
	}
	if ring, err = grant.NewRing(time.Now(), ttl); err != nil {
		return nil, nil, false, err
	}
	if data, err = json.Marshal(ring); err != nil {
		return nil, nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, false, fmt.Errorf("creating the grant key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another gated on the same directory was quicker.
		ring, data, err = readGrantRing(path)
		return ring, data, false, err
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("creating the grant key: %w", err)
	}
	_, werr := f.Write(append(data, '\n'))
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, nil, false, fmt.Errorf("writing the grant key %s: %w", path, werr)
	}
	return ring, append(data, '\n'), true, nil
}

// writeGrantRing replaces the key file at path with ring, atomically.
func writeGrantRing(path string, ring *grant.Ring) error {
	data, err := json.Marshal(ring)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".grant-keys-*")
	if err != nil {
		return fmt.Errorf("writing the grant key file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if err := tmp.Chmod(0o600); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing the grant key file: %w", err)
	}
	_, werr := tmp.Write(append(data, '\n'))
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("writing the grant key file: %w", werr)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing the grant key file: %w", err)
	}
	return nil
}

// checkGrantTTL checks --grant-ttl.
func checkGrantTTL(ttl time.Duration) error {
	if ttl < grant.MinTTL || ttl > grant.MaxTTL || ttl%time.Second != 0 {
		return usageError("--grant-ttl %s must be whole seconds from %s to %s", ttl, grant.MinTTL, grant.MaxTTL)
	}
	return nil
}

// startGrants loads the grant key ring, publishes its keys, serves the
// grant endpoints, and follows rotations of the key file.
func (s *gateServer) startGrants(ctx context.Context) error {
	path := grantKeyPath(s.o.grantKeyFile, s.o.dataDir)
	ring, data, created, err := ensureGrantRing(path, s.o.grantTTL, s.o.grantKeyFile == "")
	if err != nil {
		return usageError("grant keys: %v", err)
	}
	if created {
		s.log.Info("created the grant signing key; keep the file secret, and give every gated on the cluster a key file of its own or this one",
			zap.String("file", path), zap.String("kid", ring.Active().KID))
	}
	if maxTTL := time.Duration(ring.Active().MaxTTL) * time.Second; s.o.grantTTL > maxTTL {
		return usageError("--grant-ttl %s is longer than the active grant key allows (%s): run gated grants rotate --max-ttl %s", s.o.grantTTL, maxTTL, s.o.grantTTL)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		s.log.Warn("the grant key file is readable by others: whoever reads it can sign grants; chmod 600 it", zap.String("file", path))
	}
	s.grants, err = grants.New(ctx, s.nc, s.js, s.res.Verdicts, grants.Config{
		Ring: ring, Trails: s.auditor.Trail, Replicas: s.o.replicas, TTL: s.o.verdictTTL, Log: s.log.Named("grants"),
	})
	if err != nil {
		return err
	}
	if err := s.grants.Start(ctx); err != nil {
		return err
	}
	s.onStop("the grant endpoints", s.grants.Stop)
	outcomes, err := grants.NewOutcomes(s.res, s.grants)
	if err != nil {
		return err
	}
	if err := outcomes.Start(); err != nil {
		return err
	}
	s.onStop("the outcome reports consumer", outcomes.Stop)
	s.log.Info("grants", zap.String("key_file", path), zap.String("kid", ring.Active().KID), zap.Duration("ttl", s.o.grantTTL))
	s.watchers.Go(func() { s.followGrantKeys(path, data) })
	return nil
}

// followGrantKeys reads the key file every grantKeyPoll and, when it
// changed (gated grants rotate), publishes the new keys and signs with
// them.
func (s *gateServer) followGrantKeys(path string, last []byte) {
	t := time.NewTicker(grantKeyPoll)
	defer t.Stop()
	for {
		select {
		case <-s.watchCtx.Done():
			return
		case <-t.C:
		}
		ring, data, err := readGrantRing(path)
		if err != nil {
			s.log.Warn("reading the grant key file; signing with the keys read before", zap.Error(err))
			continue
		}
		if bytes.Equal(data, last) {
			continue
		}
		if maxTTL := time.Duration(ring.Active().MaxTTL) * time.Second; s.o.grantTTL > maxTTL {
			s.log.Error("the rotated grant key allows grants up to max_ttl_s, shorter than --grant-ttl; signing with the keys read before: rotate again with --max-ttl",
				zap.Duration("max_ttl", maxTTL), zap.Duration("grant_ttl", s.o.grantTTL))
			last = data
			continue
		}
		ctx, cancel := context.WithTimeout(s.watchCtx, 10*time.Second)
		err = s.grants.SetRing(ctx, ring)
		cancel()
		if err != nil {
			s.log.Warn("publishing the rotated grant keys; signing with the keys read before", zap.Error(err))
			continue
		}
		last = data
		s.log.Info("grant keys reloaded", zap.String("kid", ring.Active().KID))
	}
}

func grantsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "grants",
		Short: "Grant signing keys: print the published key set, rotate the key",
		Long: `Every approved action verdict carries a grant, signed with gated's Ed25519 key
(docs/GRANTS.md). gated grants keys prints the key set executors verify grants
with; gated grants rotate replaces the signing key.`,
	}
	c.AddCommand(grantsKeysCmd(), grantsRotateCmd())
	return c
}

func grantsKeysCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
		conn    natsConnOptions
	)
	c := &cobra.Command{
		Use:   "keys",
		Short: "Print the grant key set gated publishes on " + wire.GrantKeysSubject,
		Long: `keys asks ` + wire.GrantKeysSubject + ` for the key set every gated on the cluster
publishes, and prints it: a service that verifies grants may be configured with
this file instead of asking NATS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 {
				return usageError("--timeout %s must be positive", timeout)
			}
			nc, err := conn.connect(url, "gated-grants", nats.Timeout(5*time.Second), nats.MaxReconnects(0))
			if err != nil {
				return err
			}
			defer nc.Close()
			msg, err := nc.RequestWithContext(cmd.Context(), wire.GrantKeysSubject, nil)
			if err != nil {
				return fmt.Errorf("asking %s: %w", wire.GrantKeysSubject, err)
			}
			ks, err := grant.ParseKeySet(msg.Data)
			if err != nil {
				return fmt.Errorf("the key set gated answered: %w", err)
			}
			out, _ := json.MarshalIndent(ks, "", "  ")
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&url, "nats-url", nats.DefaultURL, "NATS server URL")
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the answer")
	conn.register(f)
	return c
}

func grantsRotateCmd() *cobra.Command {
	var (
		dataDir, keyFile string
		maxTTL, grace    time.Duration
	)
	c := &cobra.Command{
		Use:   "rotate",
		Short: "Make a new grant signing key active and retire the old one",
		Long: `rotate adds a new Ed25519 key to the grant key file and makes it the signing
key; the key it replaces is retired --grace from now (a running gated reads its
key file every few seconds and signs with the new key before then). A retired
key stays in the published key set until no grant it signed can be alive
(retired_at + max_ttl_s), so a rotation never invalidates a grant before its
expiry. Run it where the key file is; a running gated picks the change up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkGrantTTL(maxTTL); err != nil {
				return usageError("--max-ttl: %v", err)
			}
			if grace < grantKeyPoll || grace > time.Hour {
				return usageError("--grace %s must be from %s to 1h: every gated must read the new key file within it", grace, grantKeyPoll)
			}
			path := grantKeyPath(keyFile, dataDir)
			ring, _, err := readGrantRing(path)
			if err != nil {
				return fmt.Errorf("reading the grant key file: %w", err)
			}
			old := ring.Active().KID
			if err := ring.Rotate(time.Now(), grace, maxTTL); err != nil {
				return err
			}
			if err := writeGrantRing(path, ring); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "grant key %s is active; %s retires in %s\n", ring.Active().KID, old, grace)
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&dataDir, "data-dir", "gated-data", "data directory whose grant.keys to rotate")
	f.StringVar(&keyFile, "grant-key-file", "", "grant key file to rotate (instead of <data-dir>/grant.keys)")
	f.DurationVar(&maxTTL, "max-ttl", DefaultGrantTTL, "longest grant the new key signs; at least serve's --grant-ttl")
	f.DurationVar(&grace, "grace", DefaultRotateGrace, "how long the old key may still sign")
	return c
}

var _ engine.Granter = engine.GrantIssuer{}
