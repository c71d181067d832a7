package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestSetupRetriesOnlyUnansweredRequests(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.DeadlineExceeded, true},
		{fmt.Errorf("creating: %w", nats.ErrTimeout), true},
		{nats.ErrNoResponders, true},
		{&jetstream.APIError{ErrorCode: jsClusterNotAvailable}, true},
		{&jetstream.APIError{ErrorCode: jsNoSuitablePeers, Description: "no suitable peers for placement, peer offline"}, true},
		{&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNameInUse}, false},
		{errors.New("insufficient resources"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestRetryRepeatsUntilAnswered(t *testing.T) {
	calls := 0
	v, err := Retry(t.Context(), func(context.Context) (int, error) {
		calls++
		if calls < 3 {
			return 0, nats.ErrTimeout
		}
		return 7, nil
	})
	if err != nil || v != 7 || calls != 3 {
		t.Fatalf("retry = %d, %v after %d calls; want 7, nil after 3", v, err, calls)
	}
	refused := errors.New("replicas 3 > cluster size 1")
	calls = 0
	if _, err := Retry(t.Context(), func(context.Context) (int, error) { calls++; return 0, refused }); !errors.Is(err, refused) || calls != 1 {
		t.Fatalf("a refusal is returned at once: %v after %d calls", err, calls)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	if _, err := Retry(ctx, func(context.Context) (int, error) { return 0, nats.ErrTimeout }); !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("retry past its context: %v", err)
	}
}
