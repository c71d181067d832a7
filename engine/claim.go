package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// claimReview takes the proposal's review claim before reviewers run. It
// returns false when this delivery must not review: r.failure is set (the
// store failed, or the claim's holder stored no verdict in time) or
// r.awaited holds the verdict the holder stored meanwhile.
func (r *decision) claimReview(ctx context.Context, chosen []candidate) bool {
	if r.holder == "" {
		r.holder = streamHolder(r.d.StreamSeq)
	}
	longest := time.Duration(0)
	for _, c := range chosen {
		timeout := c.persona.Timeout
		if timeout <= 0 {
			timeout = r.e.cfg.ReviewTimeout
		}
		longest = max(longest, timeout)
	}
	// Wall-clock time, like the review deadlines it covers: claims are
	// compared across gated processes.
	mine := Claim{Holder: r.holder, Until: time.Now().Add(longest + ClaimGrace).UTC(), Delivery: r.d.Attempt}
	held, err := r.e.cfg.Store.Claim(ctx, r.tenant, r.id, mine)
	switch {
	case err == nil:
		r.claimed, r.claimRev = true, held.Revision
		// The verdict may have been stored, and its claim released, since
		// this delivery looked it up.
		stored, err := r.e.cfg.Store.Get(ctx, r.tenant, r.id)
		switch {
		case err == nil:
			r.awaited = stored
			return false
		case !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrCorruptRecord):
			r.failure = fmt.Errorf("looking up verdict %s.%s: %w", r.tenant, r.id, err)
			return false
		}
		return true
	case !errors.Is(err, ErrClaimed):
		r.failure = fmt.Errorf("claiming the review of %s.%s: %w", r.tenant, r.id, err)
		return false
	}

	// Another message carrying this proposal is under review: its verdict
	// is this delivery's verdict too.
	wait := min(max(time.Until(held.Until), time.Second), MaxClaimWait)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	started := time.Now()
	v, err := r.e.cfg.Store.Await(wctx, r.tenant, r.id)
	data := map[string]any{"holder": held.Holder, "until": held.Until, "waited_ms": ms(time.Since(started))}
	switch {
	case err == nil:
		data["outcome"] = v.Outcome
		r.recordBestEffort(ctx, EventReviewAwaited, data)
		r.awaited = v
	case ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded):
		data["error"] = "no verdict before the claim went stale"
		r.recordBestEffort(ctx, EventReviewAwaited, data)
		r.failure = fmt.Errorf("%w: %s.%s is reviewed by message %s, which stored no verdict within %s; retrying",
			ErrClaimed, r.tenant, r.id, held.Holder, wait)
	default:
		r.failure = fmt.Errorf("awaiting the verdict on %s.%s from message %s: %w", r.tenant, r.id, held.Holder, err)
	}
	return false
}

// releaseClaim drops the review claim this delivery holds, if any, when
// it leaves the proposal undecided. It is best effort: a claim left
// behind goes stale at its Until.
func (r *decision) releaseClaim(ctx context.Context) {
	if !r.claimed {
		return
	}
	r.claimed = false
	// The caller's context may be over (shutdown); the release is still
	// worth a short try.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = r.e.cfg.Store.Release(rctx, r.tenant, r.id, Claim{Holder: r.holder, Revision: r.claimRev})
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
