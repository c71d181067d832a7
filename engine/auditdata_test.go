package engine

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"

	"github.com/gated/gated/internal/strictjson"
)

// TestWritersDataIsTheDeclaredType: what the engine's own writers record
// decodes strictly (no member unknown) into the declared type.
func TestWritersDataIsTheDeclaredType(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name string
		data any
		into any
	}{
		{gated.EventPolicyDecided, policyFailedData{Error: "boom", ShadowRevision: "r2"}, new(gated.PolicyDecidedData)},
		{gated.EventPolicyDecided, gated.PolicyDecidedData{}, new(gated.PolicyDecidedData)},
		{gated.EventPolicyRechecked, gated.PolicyRecheckedData{Changed: []string{"x"}}, new(gated.PolicyRecheckedData)},
		{gated.EventReceived, gated.ReceivedData{Bytes: 1, SHA256: "ab", Subject: "s"}, new(gated.ReceivedData)},
		{gated.EventOperatorAwaited, map[string]any{"deadline": now.Format(time.RFC3339Nano), "reason": "r", "rule": "x"}, new(gated.OperatorAwaitedData)},
	} {
		raw := gated.MarshalAuditData(tc.data)
		if err := strictjson.Decode(raw, tc.into); err != nil {
			t.Errorf("%s: %s does not decode into %T: %v", tc.name, raw, tc.into, err)
		}
		want, _ := gated.NewAuditEventData(tc.name)
		if got, want := typeName(tc.into), typeName(want); got != want {
			t.Errorf("%s: the test decodes into %s, the declared type is %s", tc.name, got, want)
		}
	}
}

func typeName(v any) string {
	return strings.TrimPrefix(strings.TrimPrefix(fmtType(v), "*gated."), "gated.")
}

func fmtType(v any) string { return reflect.TypeOf(v).String() }
