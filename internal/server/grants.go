package server

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

	"github.com/gated/gated/bus/grants"
	"github.com/gated/gated/engine"
	"github.com/gated/gated/engine/grant"
	"go.uber.org/zap"
)

// grantKeyFile is the name of the grant key file gated creates in
// --data-dir when no --grant-key-file is given.
const grantKeyFile = "grant.keys"

// DefaultGrantTTL is how long a grant lives unless --grant-ttl says.
const DefaultGrantTTL = 5 * time.Minute

// GrantKeyPoll is how often serve reads its key file for a rotation.
const GrantKeyPoll = 5 * time.Second

// GrantKeyPath is the key file of serve and of `grants rotate`.
func GrantKeyPath(keyFile, dataDir string) string {
	if keyFile != "" {
		return keyFile
	}
	return filepath.Join(dataDir, grantKeyFile)
}

// ReadGrantRing reads a key file.
func ReadGrantRing(path string) (*grant.Ring, []byte, error) {
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
	ring, data, err = ReadGrantRing(path)
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
		ring, data, err = ReadGrantRing(path)
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

// WriteGrantRing replaces the key file at path with ring, atomically.
func WriteGrantRing(path string, ring *grant.Ring) error {
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

// CheckGrantTTL checks --grant-ttl.
func CheckGrantTTL(ttl time.Duration) error {
	if ttl < grant.MinTTL || ttl > grant.MaxTTL || ttl%time.Second != 0 {
		return usageError("--grant-ttl %s must be whole seconds from %s to %s", ttl, grant.MinTTL, grant.MaxTTL)
	}
	return nil
}

// startGrants loads the grant key ring, publishes its keys, serves the
// grant endpoints, and follows rotations of the key file.
func (s *Server) startGrants(ctx context.Context) error {
	path := GrantKeyPath(s.cfg.GrantKeyFile, s.cfg.DataDir)
	ring, data, created, err := ensureGrantRing(path, s.cfg.GrantTTL, s.cfg.GrantKeyFile == "")
	if err != nil {
		return usageError("grant keys: %v", err)
	}
	if created {
		s.log.Info("created the grant signing key; keep the file secret, and give every gated on the cluster a key file of its own or this one",
			zap.String("file", path), zap.String("kid", ring.Active().KID))
	}
	if maxTTL := time.Duration(ring.Active().MaxTTL) * time.Second; s.cfg.GrantTTL > maxTTL {
		return usageError("--grant-ttl %s is longer than the active grant key allows (%s): run gated grants rotate --max-ttl %s", s.cfg.GrantTTL, maxTTL, s.cfg.GrantTTL)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		s.log.Warn("the grant key file is readable by others: whoever reads it can sign grants; chmod 600 it", zap.String("file", path))
	}
	s.grants, err = grants.New(ctx, s.nc, s.js, s.res.Verdicts, grants.Config{
		Ring: ring, Trails: s.auditor.Trail, Replicas: s.cfg.Replicas, TTL: s.cfg.VerdictTTL, Log: s.log.Named("grants"),
		Executed: s.recordExecuted,
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
	s.log.Info("grants", zap.String("key_file", path), zap.String("kid", ring.Active().KID), zap.Duration("ttl", s.cfg.GrantTTL))
	s.watchers.Go(func() { s.followGrantKeys(path, data) })
	return nil
}

// followGrantKeys reads the key file every GrantKeyPoll and, when it
// changed (gated grants rotate), publishes the new keys and signs with
// them.
func (s *Server) followGrantKeys(path string, last []byte) {
	t := time.NewTicker(GrantKeyPoll)
	defer t.Stop()
	for {
		select {
		case <-s.watchCtx.Done():
			return
		case <-t.C:
		}
		ring, data, err := ReadGrantRing(path)
		if err != nil {
			s.log.Warn("reading the grant key file; signing with the keys read before", zap.Error(err))
			continue
		}
		if bytes.Equal(data, last) {
			continue
		}
		if maxTTL := time.Duration(ring.Active().MaxTTL) * time.Second; s.cfg.GrantTTL > maxTTL {
			s.log.Error("the rotated grant key allows grants up to max_ttl_s, shorter than --grant-ttl; signing with the keys read before: rotate again with --max-ttl",
				zap.Duration("max_ttl", maxTTL), zap.Duration("grant_ttl", s.cfg.GrantTTL))
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

var _ engine.Granter = engine.GrantIssuer{}
