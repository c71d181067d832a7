package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gated/gated/engine/wire"
)

// Result is what became of one notification at one sink: delivered, or
// failed for good. Each is appended to the audit stream as a
// notify.delivered or notify.failed record.
type Result struct {
	Sink     string `json:"sink"`
	Endpoint string `json:"endpoint"`
	Kind     Kind   `json:"kind"`
	// Notification is the notification's ID; SourceSeq the audit stream
	// sequence of the record it comes from.
	Notification string `json:"notification"`
	SourceSeq    uint64 `json:"source_seq"`
	Delivered    bool   `json:"delivered"`
	// Attempts is how many requests were made (0 when none was).
	Attempts int `json:"attempts"`
	// Status is the HTTP status of the last answer, 0 when none came.
	Status int `json:"status,omitempty"`
	// Error says why the last attempt failed, and why gated gave up.
	Error     string `json:"error,omitempty"`
	ElapsedMS int64  `json:"elapsed_ms"`

	tenant, proposalID string
}

// delivery is one notification queued for one sink.
type delivery struct {
	n    *Notification
	body []byte
	// read is when the notifier read the record; MaxAge counts from it.
	read time.Time
	src  *source
}

// sinkWorker delivers one sink's queue, one notification at a time.
type sinkWorker struct {
	sink   Sink
	client *http.Client
	queue  chan *delivery
	// retried is called when an attempt failed and another follows.
	retried func(sink string)
	now     func() time.Time
}

func newSinkWorker(s Sink, retried func(string)) *sinkWorker {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	return &sinkWorker{
		sink: s,
		client: &http.Client{
			Transport: tr,
			// A redirect is a failure: the sink's URL is the one place a
			// signed notification goes.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		queue:   make(chan *delivery, s.Queue),
		retried: retried,
		now:     time.Now,
	}
}

// errStopped marks a delivery cut short by the notifier's stop: it is
// neither delivered nor failed, and its record is read again later.
var errStopped = errors.New("the notifier stopped")

// deliver tries d until it is delivered, fails for good, or ctx ends
// (errStopped).
func (w *sinkWorker) deliver(ctx context.Context, d *delivery) (Result, error) {
	res := Result{Sink: w.sink.Name, Endpoint: w.sink.Endpoint(), Kind: d.n.Kind, Notification: d.n.ID,
		SourceSeq: d.n.AuditSeq, tenant: d.n.Tenant, proposalID: d.n.ProposalID}
	start := w.now()
	deadline := d.read.Add(w.sink.MaxAge)
	defer func() { res.ElapsedMS = w.now().Sub(start).Milliseconds() }()
	if !w.now().Before(deadline) {
		res.Error = fmt.Sprintf("waited in the queue past max_age %s; not sent", w.sink.MaxAge)
		return res, nil
	}
	pause := w.sink.Backoff
	for {
		res.Attempts++
		status, err := w.attempt(ctx, d)
		res.Status = status
		if err == nil {
			res.Delivered, res.Error = true, ""
			return res, nil
		}
		if ctx.Err() != nil {
			return res, errStopped
		}
		res.Error = err.Error()
		if permanent(status) {
			res.Error += "; not retried: a 4xx answer says the request itself is refused"
			return res, nil
		}
		if res.Attempts >= w.sink.MaxAttempts {
			res.Error += fmt.Sprintf("; gave up after max_attempts %d", w.sink.MaxAttempts)
			return res, nil
		}
		// Equal jitter: half the pause, plus up to as much again at random,
		// so that sinks failing together do not retry in step.
		wait := pause/2 + rand.N(pause/2+1)
		pause = min(2*pause, MaxBackoff)
		if w.now().Add(wait).After(deadline) {
			res.Error += fmt.Sprintf("; gave up: the next attempt would be past max_age %s", w.sink.MaxAge)
			return res, nil
		}
		w.retried(w.sink.Name)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return res, errStopped
		}
	}
}

// permanent tells whether an answer with status is not worth another
// attempt: a 4xx other than 408 (timeout), 425 (too early) and 429 (too
// many requests).
func permanent(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusTooEarly && status != http.StatusTooManyRequests
}

// attempt sends d once, signed now, and returns the answer's status.
func (w *sinkWorker) attempt(ctx context.Context, d *delivery) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, w.sink.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.sink.URL, bytes.NewReader(d.body))
	if err != nil {
		return 0, errors.New("building the request failed")
	}
	ts := strconv.FormatInt(w.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "gated-notify/1")
	req.Header.Set(wire.NotifyIDHeader, d.n.ID)
	req.Header.Set(wire.NotifyKindHeader, string(d.n.Kind))
	req.Header.Set(wire.NotifyTimestampHeader, ts)
	req.Header.Set(wire.NotifySignatureHeader, Sign(w.sink.Secret, ts, d.body))
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, describe(err, w.sink.Timeout)
	}
	// Read (a bounded part of) the answer, so the connection is reused.
	_, rerr := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return resp.StatusCode, fmt.Errorf("answered %d, a redirect; redirects are not followed: give the sink's final URL", resp.StatusCode)
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		return resp.StatusCode, fmt.Errorf("answered %d", resp.StatusCode)
	case rerr != nil && ctx.Err() != nil:
		return resp.StatusCode, fmt.Errorf("answered %d, but the body did not end within the timeout %s", resp.StatusCode, w.sink.Timeout)
	}
	return resp.StatusCode, nil
}

// describe words a request error without the URL, which may hold a
// token.
func describe(err error, timeout time.Duration) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("no answer within the timeout %s", timeout)
	}
	return fmt.Errorf("request failed: %v", err)
}

// Sign is the value of the Gated-Notify-Signature header of a request
// signed at timestamp (Unix seconds, as the Gated-Notify-Timestamp
// header spells it) with body: "v1=" and the hex HMAC-SHA256 under
// secret of timestamp, ".", and body.
func Sign(secret []byte, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a notification as its receiver should: the signature
// header is Sign's for the timestamp header and the body, and the
// timestamp is within tolerance of now (so that a request recorded and
// played again later is refused). Receivers in other languages do the
// same in a few lines (docs/NOTIFICATIONS.md).
func Verify(secret []byte, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%s %q is not Unix seconds", wire.NotifyTimestampHeader, timestamp)
	}
	if skew := now.Sub(time.Unix(sec, 0)); skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%s is %s from now; at most %s is accepted", wire.NotifyTimestampHeader, skew.Round(time.Second), tolerance)
	}
	if !hmac.Equal([]byte(Sign(secret, timestamp, body)), []byte(signature)) {
		return fmt.Errorf("%s does not match the body under the secret", wire.NotifySignatureHeader)
	}
	return nil
}
