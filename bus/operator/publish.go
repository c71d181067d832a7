package operator

import (
	"context"
	"encoding/json"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// PublishVerdicts publishes verdicts on gated.verdicts.<tenant>.<id>,
// as the worker does.
func PublishVerdicts(nc *nats.Conn) VerdictHook {
	return func(_ context.Context, v *gated.Verdict) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		return nc.Publish(wire.VerdictSubject(v.Tenant, v.ProposalID), data)
	}
}
