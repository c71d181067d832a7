package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gated/gated"
	"github.com/gated/gated/engine/wire"
)

// StatusUpdate is one message of a watch: a status event, or Err for a
// message on the status subject that is not a well-formed status event
// (an *gated.StatusError naming the member at fault). A bad message
// does not end the watch.
type StatusUpdate struct {
	Status *gated.Status
	Err    error
}

// watchBuffer is how many status messages a watch holds before NATS
// drops them as a slow consumer; a proposal has a handful of stages.
const watchBuffer = 64

// Watch follows the progress of tenant's proposal id: gated publishes
// each stage on gated.status.<tenant>.<id> (received, policy_decided,
// review_started, awaiting_operator, decided). The subscription is in
// place on the server when Watch returns, and gated has been asked for
// the proposal's statuses (gated.watch.<tenant>.<id>), so a proposal
// published after it loses no stage; the channel is closed when ctx ends. Status events
// are best effort and unauthenticated: they show progress, and only the
// verdict (Propose, Verdict) says what a fleet may do. A tenant's user
// needs to subscribe to gated.status.<tenant>.> for it (NATS reports a
// subscription it refuses to the connection's error handler; the watch
// then stays silent). Errors:
// ErrBadProposal (tenant or id is not a valid token), or a NATS error.
func (c *Client) Watch(ctx context.Context, tenant, id string) (<-chan StatusUpdate, error) {
	if !gated.ValidTenant(tenant) {
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9_-]{1,64}", ErrBadProposal, tenant)
	}
	if !gated.ValidID(id) {
		return nil, fmt.Errorf("%w: id %q must match [A-Za-z0-9_-]{1,128}", ErrBadProposal, id)
	}
	msgs := make(chan *nats.Msg, watchBuffer)
	sub, err := c.nc.ChanSubscribe(wire.StatusSubject(tenant, id), msgs)
	if err != nil {
		return nil, fmt.Errorf("subscribing to the status of %s.%s: %w", tenant, id, err)
	}
	if err := c.nc.FlushWithContext(ctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("subscribing to the status of %s.%s: %w", tenant, id, err)
	}
	c.announceWatch(ctx, tenant, id)
	out := make(chan StatusUpdate)
	go func() {
		defer close(out)
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case m := <-msgs:
				u := statusUpdate(tenant, id, m.Data)
				select {
				case out <- u:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// watchAsk bounds how long Watch waits for gated to answer its ask.
const watchAsk = 5 * time.Second

// announceWatch asks gated for the statuses of tenant's proposal id and
// waits for its answer, within ctx and watchAsk. gated publishes a
// status only when somebody asked for it or it sees a subscriber, so the
// ask comes before Watch returns. An ask nobody answers (no gated, or one
// that does not take asks, whose statuses all go out) or that NATS
// refuses leaves the watch to the statuses gated sends anyway.
func (c *Client) announceWatch(ctx context.Context, tenant, id string) {
	ctx, cancel := context.WithTimeout(ctx, watchAsk)
	defer cancel()
	_, _ = c.nc.RequestWithContext(ctx, wire.StatusWatchSubject(tenant, id), nil)
}

// statusUpdate reads one message of tenant's proposal id's status subject.
func statusUpdate(tenant, id string, data []byte) StatusUpdate {
	st, err := gated.DecodeStatus(data)
	if err != nil {
		return StatusUpdate{Err: err}
	}
	switch {
	case st.Tenant != tenant:
		return StatusUpdate{Err: &gated.StatusError{Field: "tenant", Problem: fmt.Sprintf("is %s on the status subject of %s.%s", st.Tenant, tenant, id)}}
	case st.ID != id:
		return StatusUpdate{Err: &gated.StatusError{Field: "id", Problem: fmt.Sprintf("is %s on the status subject of %s.%s", st.ID, tenant, id)}}
	}
	return StatusUpdate{Status: st}
}
