package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/internal/server"
)

// replayIntegrityOptions are the flags with which replay checks its range
// as `audit verify` checks the stream: the audit keys of the records'
// MACs, and anchors for the end of the chains.
type replayIntegrityOptions struct {
	keyFiles []string
	anchors  string
	stdin    io.Reader
}

func (o *replayIntegrityOptions) register(f *pflag.FlagSet) {
	f.StringSliceVar(&o.keyFiles, "audit-key-file", nil, "audit key that MACs the records (repeatable, for rotated keys), as for audit verify; with --data-dir, <data-dir>/audit.key when there is one; without a key MACs are not checked")
	f.StringVar(&o.anchors, "anchors", "", "heads kept from an earlier audit verify --json (file, or - for standard input): the range must still hold each anchored record it reaches")
}

// load reads the keys and the anchors: the anchors of one tenant when
// tenant is set, the others being outside the range. With no key file,
// dataDir's audit key is used when it has one, as serve wrote with it.
func (o *replayIntegrityOptions) load(dataDir, tenant string) (keys [][]byte, anchors []audit.Head, err error) {
	for _, f := range o.keyFiles {
		key, err := server.ReadAuditKey(f)
		if err != nil {
			return nil, nil, usageError("--audit-key-file: %v", err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 && dataDir != "" {
		key, err := server.ReadAuditKey(filepath.Join(dataDir, server.AuditKeyName))
		switch {
		case err == nil:
			keys = append(keys, key)
		case !errors.Is(err, fs.ErrNotExist):
			return nil, nil, fmt.Errorf("reading the data dir's audit key: %w", err)
		}
	}
	if o.anchors == "" {
		return keys, nil, nil
	}
	data, err := readInput(o.anchors, o.stdin)
	if err != nil {
		return nil, nil, usageError("--anchors: %v", err)
	}
	heads, err := audit.ParseHeads(data)
	if err != nil {
		return nil, nil, usageError("--anchors %s: %v", o.anchors, err)
	}
	for _, h := range heads {
		if tenant == "" || h.Tenant == tenant {
			anchors = append(anchors, h)
		}
	}
	return keys, anchors, nil
}
