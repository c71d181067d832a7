package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gated/gated"
)

// claimGrace is how long a review claim outlives the deadline of the
// reviews it covers: time for the holder to seal the audit trail and store
// the verdict, and slack for clocks that disagree between gated processes.
const claimGrace = 30 * time.Second

// maxClaimWait bounds how long a delivery waits for the verdict of a
// review another message holds the claim on, whatever that claim says.
const maxClaimWait = 10 * time.Minute

// reviewClaim is the claim protocol of one delivery: before reviewers run
// it takes the proposal's review claim in the store, so that the proposal
// is reviewed once however many messages carry it, and it releases the
// claim when the delivery ends with no verdict stored. The decision asks
// it one question, take: review, or hand over the verdict another
// message's review stored.
type reviewClaim struct {
	claims     ReviewClaims
	verdicts   VerdictReader
	tenant, id string
	// holder names this delivery in review claims; held is true once it
	// holds (or may hold) the proposal's claim.
	holder string
	held   bool
	// rev is the store's revision of the claim this delivery took; 0 when
	// it took none, or took over one left by a crash (GiveUp).
	rev uint64
}

// newClaim returns the claim protocol of this delivery, holding nothing
// yet.
func (r *pass) newClaim() *reviewClaim {
	return &reviewClaim{claims: r.e.cfg.Store, verdicts: r.e.cfg.Store, tenant: r.tenant, id: r.id, holder: streamHolder(r.d.StreamSeq)}
}

// take takes the proposal's review claim for reviews that may run for
// longest. It returns nil and no error when this delivery reviews. It
// returns a verdict when this delivery must not review because the
// verdict is there: stored since the delivery looked it up, or stored by
// the review of the message that holds the claim, which take waits for
// (recording review.awaited on log). An error means the store failed, or
// (wrapping ErrClaimed) the claim's holder stored no verdict in time.
func (c *reviewClaim) take(ctx context.Context, longest time.Duration, delivery int, log *auditLog) (*gated.Verdict, error) {
	// Wall-clock time, like the review deadlines it covers: claims are
	// compared across gated processes.
	mine := Claim{Holder: c.holder, Until: time.Now().Add(longest + claimGrace).UTC(), Delivery: delivery}
	held, err := c.claims.Claim(ctx, c.tenant, c.id, mine)
	switch {
	case err == nil && !held.Replaced:
		// No claim was there: no review stored a verdict, since a review's
		// verdict keeps its claim (as GiveUp's does). A verdict stored
		// without one (decided by the policy alone, given up on before any
		// review, or stored by a create that reported a failure, after
		// which its delivery released the claim) is met by finish's
		// create: this review is spent, and the stored verdict stands.
		c.held, c.rev = true, held.Revision
		return nil, nil
	case err == nil:
		c.held, c.rev = true, held.Revision
		// The claim replaced went stale, or was this message's earlier
		// delivery's: its holder may have stored the verdict.
		stored, err := c.verdicts.Get(ctx, c.tenant, c.id)
		switch {
		case err == nil:
			return stored, nil
		case !errors.Is(err, gated.ErrNotFound) && !errors.Is(err, gated.ErrCorruptRecord):
			return nil, fmt.Errorf("looking up verdict %s.%s: %w", c.tenant, c.id, err)
		}
		return nil, nil
	case !errors.Is(err, gated.ErrClaimed):
		return nil, fmt.Errorf("claiming the review of %s.%s: %w", c.tenant, c.id, err)
	}

	// Another message carrying this proposal is under review: its verdict
	// is this delivery's verdict too.
	log.flush(ctx)
	wait := min(max(time.Until(held.Until), time.Second), maxClaimWait)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	started := time.Now()
	v, err := c.claims.Await(wctx, c.tenant, c.id)
	data := map[string]any{"holder": held.Holder, "until": held.Until, "waited_ms": ms(time.Since(started))}
	switch {
	case err == nil:
		data["outcome"] = v.Outcome
		log.recordBestEffort(ctx, gated.EventReviewAwaited, data)
		return v, nil
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		data["error"] = "no verdict before the claim went stale"
		log.recordBestEffort(ctx, gated.EventReviewAwaited, data)
		return nil, fmt.Errorf("%w: %s.%s is reviewed by message %s, which stored no verdict within %s; retrying",
			gated.ErrClaimed, c.tenant, c.id, held.Holder, wait)
	default:
		return nil, fmt.Errorf("awaiting the verdict on %s.%s from message %s: %w", c.tenant, c.id, held.Holder, err)
	}
}

// release drops the review claim this delivery holds, if any, when it
// leaves the proposal undecided. It is best effort: a claim left behind
// goes stale at its Until. A nil claim holds nothing.
func (c *reviewClaim) release(ctx context.Context) {
	if c == nil || !c.held {
		return
	}
	c.held = false
	// The caller's context may be over (shutdown); the release is still
	// worth a short try.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = c.claims.Release(rctx, c.tenant, c.id, Claim{Holder: c.holder, Revision: c.rev})
}

// streamHolder names the holder of a review claim: the proposal message's
// stream sequence or, without one, a name no other delivery has.
func streamHolder(seq uint64) string {
	if seq == 0 {
		var b [12]byte
		_, _ = rand.Read(b[:])
		return "delivery:" + hex.EncodeToString(b[:])
	}
	return "seq:" + strconv.FormatUint(seq, 10)
}
