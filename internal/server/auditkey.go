package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/gated/gated/bus/audit"
)

// AuditKeyName is the name of the key gated creates in --data-dir when it
// runs the embedded server and no key file is given.
const AuditKeyName = "audit.key"

// ReadAuditKey reads an audit key file: 32 or more random bytes, raw or
// hex.
func ReadAuditKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	key, err := audit.ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// ensureAuditKey returns the key in dir/audit.key, creating it (32 random
// bytes in hex, mode 0600) when there is none. created says which.
func ensureAuditKey(dir string) (key []byte, path string, created bool, err error) {
	path = filepath.Join(dir, AuditKeyName)
	key, err = ReadAuditKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return key, path, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, path, false, fmt.Errorf("creating the audit key: %w", err)
	}
	raw := make([]byte, audit.MinKeyLen)
	if _, err := rand.Read(raw); err != nil {
		return nil, path, false, fmt.Errorf("creating the audit key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another gated on the same directory was quicker.
		key, err = ReadAuditKey(path)
		return key, path, false, err
	}
	if err != nil {
		return nil, path, false, fmt.Errorf("creating the audit key: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(raw) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return nil, path, false, fmt.Errorf("writing the audit key %s: %w", path, werr)
	}
	return raw, path, true, nil
}

// parsePublishMode reads --audit-publish.
func parsePublishMode(s string) (audit.PublishMode, error) {
	switch s {
	case "auto":
		return audit.PublishAuto, nil
	case "batches":
		return audit.PublishBatches, nil
	case "one-at-a-time":
		return audit.PublishOneAtATime, nil
	case "pipelined":
		return audit.PublishPipelined, nil
	}
	return 0, usageError("--audit-publish %q: want auto, batches, pipelined or one-at-a-time", s)
}

// serveAuditKey decides, before serve writes anything, the key its audit
// records are MACed with: --audit-key-file; failing that, with the
// embedded server, <data-dir>/audit.key, created on first start; failing
// that, none, and forged records cannot be detected, which it logs.
//
// The key must extend the audit stream's chain (see audit.CheckKey):
// a gated without the key of a stream of MACed records, or with another
// key, does not start, and a missing <data-dir>/audit.key is not replaced
// while the stream holds MACed records, unless --audit-key-rotate says the
// change is meant.
func serveAuditKey(ctx context.Context, js jetstream.JetStream, o Config, embedded bool, log *zap.Logger) ([]byte, error) {
	var (
		key     []byte
		keyFile = o.AuditKeyFile
		err     error
	)
	switch {
	case keyFile != "":
		if key, err = ReadAuditKey(keyFile); err != nil {
			return nil, usageError("--audit-key-file: %v", err)
		}
		if st, err := os.Stat(keyFile); err == nil && st.Mode().Perm()&0o077 != 0 {
			log.Warn("the audit key file is readable by others: whoever reads it can forge audit records; chmod 600 it",
				zap.String("file", keyFile), zap.Stringer("mode", st.Mode().Perm()))
		}
	case embedded:
		keyFile = filepath.Join(o.DataDir, AuditKeyName)
		if key, err = ReadAuditKey(keyFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = audit.CheckKey(checkCtx, js, key)
	cancel()
	var mismatch *audit.KeyError
	switch {
	case errors.As(err, &mismatch) && o.AuditKeyRotate:
		// Logged below, once the new key is known.
	case errors.As(err, &mismatch):
		return nil, auditKeyRefusal(mismatch, o, keyFile, embedded)
	case err != nil:
		return nil, fmt.Errorf("checking the audit key against the audit stream: %w", err)
	}
	switch {
	case key != nil:
	case embedded:
		var created bool
		if key, _, created, err = ensureAuditKey(o.DataDir); err != nil {
			return nil, err
		}
		if created {
			log.Info("created the audit key; give it to gated audit verify --audit-key-file, and keep a copy outside the data directory",
				zap.String("file", keyFile))
		}
	default:
		log.Warn("no --audit-key-file: audit records are chained but not MACed, so a forged record that follows the format cannot be detected")
	}
	if mismatch != nil {
		log.Warn("--audit-key-rotate: the audit key changes; verify needs the old key and the new one from here on",
			zap.String("chain_key_id", mismatch.RecordKeyID), zap.Uint64("chain_seq", mismatch.Seq), zap.String("new_key_id", keyID(key)))
	}
	return key, nil
}

// keyID is the id of key, or "none".
func keyID(key []byte) string {
	if len(key) == 0 {
		return "none"
	}
	return audit.KeyID(key)
}

// auditKeyRefusal explains why serve does not start with the key it has,
// and how to give it the right one.
func auditKeyRefusal(e *audit.KeyError, o Config, keyFile string, embedded bool) error {
	const share = "give every gated on this stream the same key: --audit-key-file FILE, GATED_AUDIT_KEY_FILE=FILE or audit_key_file in the --config file"
	const rotate = "; to start a new key on purpose, add --audit-key-rotate"
	switch {
	case e.Problem == audit.KeyMissing && embedded && o.AuditKeyFile == "":
		return fmt.Errorf("%s is missing, yet the audit stream holds records MACed with key %s (the newest at seq %d): restore the key file from your copy, or give it with --audit-key-file%s",
			keyFile, e.RecordKeyID, e.Seq, rotate)
	case e.Problem == audit.KeyMissing:
		return fmt.Errorf("%v: %s (the first gated keeps it in <data-dir>/%s)%s", e, share, AuditKeyName, rotate)
	case e.Problem == audit.KeyOther:
		return fmt.Errorf("%s holds key %s, but the audit stream's newest record (seq %d) is MACed with key %s: %s%s",
			keyFile, e.KeyID, e.Seq, e.RecordKeyID, share, rotate)
	}
	return fmt.Errorf("%v: run gated audit verify --audit-key-file %s; to start anyway, add --audit-key-rotate", e, keyFile)
}

// newServeAuditor starts serve's audit writer with the key serveAuditKey
// chose.
func newServeAuditor(ctx context.Context, js jetstream.JetStream, o Config, key []byte, log *zap.Logger) (*audit.Writer, error) {
	return newObservedAuditor(ctx, js, o, key, log, nil)
}

// newObservedAuditor is newServeAuditor whose writer tells onSeal how
// long each trail's append took (audit.Config.OnSeal); onSeal may be nil.
func newObservedAuditor(ctx context.Context, js jetstream.JetStream, o Config, key []byte, log *zap.Logger, onSeal func(time.Duration, error)) (*audit.Writer, error) {
	mode, err := parsePublishMode(o.AuditPublish)
	if err != nil {
		return nil, err
	}
	a, err := audit.NewWriter(ctx, js, audit.Config{Key: key, Log: log.Named("audit"), Publish: mode, Uncompressed: !o.AuditCompress, OnSeal: onSeal})
	if err != nil {
		return nil, err
	}
	log.Info("audit trail", zap.String("instance", a.Instance()), zap.String("key_id", a.KeyID()), zap.Bool("atomic_batches", a.Batching()), zap.Bool("compressed", o.AuditCompress))
	return a, nil
}

// closeAuditor drains the audit writer at shutdown, until ctx ends:
// events queued are stored. It returns, and logs, what kept them from
// being stored.
func closeAuditor(ctx context.Context, a *audit.Writer, log *zap.Logger) error {
	err := a.Close(ctx)
	if err != nil {
		log.Error("audit events queued at shutdown were lost", zap.Error(err))
	}
	return err
}
