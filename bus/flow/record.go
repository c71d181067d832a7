package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/gated/gated"
)

// MaxRecent bounds the executed actions one record keeps, whatever the
// data asks.
const MaxRecent = 256

// recordVersion is the version of the record format.
const recordVersion = 1

// record is an agent's flow state as the bucket keeps it.
type record struct {
	V      int                    `json:"v"`
	Recent []gated.ExecutedAction `json:"recent"`
}

// errCorrupt is the cause of a record that does not decode.
var errCorrupt = errors.New("the flow record is corrupt")

// decodeRecord reads a record strictly: one object of the known members,
// a known version, every action with a proposal id, an action, valid
// labels and a time, at most MaxRecent of them.
func decodeRecord(data []byte) (record, error) {
	var r record
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return record{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if dec.More() {
		return record{}, fmt.Errorf("%w: data after the record", errCorrupt)
	}
	switch {
	case r.V != recordVersion:
		return record{}, fmt.Errorf("%w: version %d, want %d", errCorrupt, r.V, recordVersion)
	case len(r.Recent) > MaxRecent:
		return record{}, fmt.Errorf("%w: %d actions, more than %d", errCorrupt, len(r.Recent), MaxRecent)
	}
	for i, a := range r.Recent {
		if !gated.ValidID(a.ProposalID) || !gated.ValidAction(a.Action) || a.At.IsZero() || len(a.Labels) > 2*gated.MaxLabels {
			return record{}, fmt.Errorf("%w: recent[%d] is not an executed action", errCorrupt, i)
		}
		for _, l := range a.Labels {
			if !gated.ValidLabel(l) {
				return record{}, fmt.Errorf("%w: recent[%d] has label %q", errCorrupt, i, l)
			}
		}
	}
	return r, nil
}

// add returns r with a added, unless its proposal is there already,
// without the actions that ran a window or more before a, and at most
// max of them, newest last.
func (r record) add(a gated.ExecutedAction, window time.Duration, max int) (record, bool) {
	for _, b := range r.Recent {
		if b.ProposalID == a.ProposalID {
			return r, false
		}
	}
	out := record{V: recordVersion, Recent: make([]gated.ExecutedAction, 0, len(r.Recent)+1)}
	for _, b := range r.Recent {
		if b.At.After(a.At.Add(-window)) {
			out.Recent = append(out.Recent, b)
		}
	}
	out.Recent = append(out.Recent, a)
	slices.SortStableFunc(out.Recent, func(x, y gated.ExecutedAction) int { return x.At.Compare(y.At) })
	if max < 1 || max > MaxRecent {
		max = MaxRecent
	}
	if n := len(out.Recent); n > max {
		out.Recent = out.Recent[n-max:]
	}
	return out, true
}
