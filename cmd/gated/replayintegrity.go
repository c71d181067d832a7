package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/pflag"

	"github.com/gated/gated/bus/audit"
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
		key, err := readAuditKey(f)
		if err != nil {
			return nil, nil, usageError("--audit-key-file: %v", err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 && dataDir != "" {
		key, err := readAuditKey(filepath.Join(dataDir, auditKeyFile))
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

// rangeEnd is where the stream ends before the replay reads it, so that
// records deleted from its end are seen: the chain alone does not show
// them.
func rangeEnd(ctx context.Context, js jetstream.JetStream, q audit.Query) (audit.RangeEnd, error) {
	end := audit.RangeEnd{}
	if q.Since.IsZero() {
		end.From = q.StartSeq
	}
	s, err := js.Stream(ctx, audit.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return end, audit.ErrNoStream
	}
	if err != nil {
		return end, fmt.Errorf("opening stream %s: %w", audit.Stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return end, fmt.Errorf("reading stream %s: %w", audit.Stream, err)
	}
	end.StreamLast = info.State.LastSeq
	return end, nil
}

// replayIntegrity is what the replay report says of the checks of its
// range beyond the chain: the MACs, and the end of the range.
type replayIntegrity struct {
	// MACsChecked is true when audit keys were given; KeyIDs names them.
	MACsChecked bool     `json:"macs_checked"`
	KeyIDs      []string `json:"key_ids,omitempty"`
	// EndChecked says how the end of the range was checked: against the
	// stream's last sequence (every tenant's records), the latest stored
	// verdict, anchors; empty when it was not.
	EndChecked    []string             `json:"end_checked"`
	LatestVerdict *audit.VerdictAnchor `json:"latest_verdict,omitempty"`
	Anchors       audit.AnchorCheck    `json:"anchors"`
}

// Ways the end of a replayed range is checked.
const (
	endByStreamSeq = "stream_last_seq"
	endByVerdict   = "latest_verdict"
	endByAnchors   = "anchors"
)

// checkIntegrity ends the range check chk: it checks the end of the
// stream against the verdict store (a problem found joins chk's) and sums
// up what was checked, given the anchors' fate ac.
func checkIntegrity(ctx context.Context, js jetstream.JetStream, q audit.Query, chk *audit.Report, ac audit.AnchorCheck) (replayIntegrity, error) {
	in := replayIntegrity{MACsChecked: chk.MACsChecked, KeyIDs: chk.KeyIDs, Anchors: ac, EndChecked: []string{}}
	if q.Tenant == "" {
		in.EndChecked = append(in.EndChecked, endByStreamSeq)
	}
	latest, problem, err := audit.CheckLatestVerdict(ctx, js, q.Tenant)
	if err != nil {
		return in, fmt.Errorf("checking the end of the audit stream against the verdict store: %w", err)
	}
	if latest != nil {
		in.EndChecked, in.LatestVerdict = append(in.EndChecked, endByVerdict), latest
	}
	if problem != nil {
		chk.Problems = append(chk.Problems, *problem)
	}
	if ac.Matched+ac.Missing > 0 {
		in.EndChecked = append(in.EndChecked, endByAnchors)
	}
	return in, nil
}

// writeIntegrityText prints what the range check covered.
func writeIntegrityText(b *strings.Builder, in replayIntegrity) {
	if in.MACsChecked {
		fmt.Fprintf(b, "MACs checked with key %s\n", strings.Join(in.KeyIDs, ", "))
	} else {
		fmt.Fprintln(b, "MACs not checked (no --audit-key-file: forged records that follow the format go unnoticed)")
	}
	ac := in.Anchors
	for _, how := range in.EndChecked {
		switch how {
		case endByStreamSeq:
			fmt.Fprintln(b, "end of the range checked against the stream's last sequence (records deleted from the end of the stream)")
		case endByVerdict:
			v := in.LatestVerdict
			fmt.Fprintf(b, "end of the stream checked against the latest stored verdict (%s.%s, audit_seq %d)\n", v.Tenant, v.ID, v.AuditSeq)
		case endByAnchors:
			fmt.Fprintf(b, "end of the range checked against %d anchor(s): %d matched, %d missing\n", ac.Matched+ac.Missing, ac.Matched, ac.Missing)
		}
	}
	if len(in.EndChecked) == 0 {
		fmt.Fprintln(b, "end of the range not checked: records cut from the end of one tenant's chain leave no trace in it, and the verdict store holds no verdict of it to check against; give --anchors (the heads of an earlier audit verify --json)")
	}
	if ac.Before > 0 {
		fmt.Fprintf(b, "%d anchor(s) before the range: not checked by it\n", ac.Before)
	}
}
