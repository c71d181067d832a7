package notify_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
	"github.com/gated/gated/bus/notify"
	"github.com/gated/gated/plugins"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		note, event, tenant, data string
		want                      notify.Kind // "" for no notification
		summary                   string
	}{
		{note: "held for an operator", event: gated.EventOperatorAwaited, tenant: "acme",
			data: `{"action":"db_drop","deadline":"2030-01-01T00:00:00Z","reason":"tenant_wide","rule":"route_operator"}`,
			want: notify.KindAwaitingOperator, summary: "proposal acme.p1 (db_drop) waits for an operator until 2030-01-01T00:00:00Z: tenant_wide"},
		{note: "timeout", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"timeout","reason":"deadline passed\nmore"}`,
			want: notify.KindTimeout, summary: "proposal acme.p1 timed out: deadline passed"},
		{note: "escalation", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"rejected","run":{"run_id":"r9","round":3,"next":"escalation"}}`,
			want: notify.KindEscalation, summary: "run r9 of acme is escalated to a human after round 3"},
		{note: "continuation is decided", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"rejected","run":{"run_id":"r9","round":1,"next":"continuation"}}`,
			want: notify.KindDecided},
		{note: "held action verdict", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"blocked","awaiting_operator":{"deadline":"2030-01-01T00:00:00Z","reason":"listed action"}}`},
		{note: "held run verdict", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"blocked","run":{"awaiting_operator":["c1"]}}`},
		{note: "empty awaiting is not held", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"blocked","awaiting_operator":""}`,
			want: notify.KindDecided},
		{note: "approved", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":"approved","reason":"read"}`,
			want: notify.KindDecided, summary: "proposal acme.p1 is approved: read"},
		{note: "plugin exited", event: plugins.EventPluginExited, tenant: "_", data: `{"plugin":"llm"}`,
			want: notify.KindPluginDown, summary: "reviewer plugin llm exited"},
		{note: "plugin unhealthy", event: plugins.EventPluginUnhealthy, tenant: "_", data: `{"plugin":"sop"}`, want: notify.KindPluginDown},
		{note: "plugin refused", event: plugins.EventPluginRefused, tenant: "_", data: `{"plugin":"x","why":"checksum mismatch","pinned_sha256":"ab"}`,
			want: notify.KindPluginDown, summary: "reviewer plugin x was refused at launch: checksum mismatch"},
		{note: "plugin started", event: plugins.EventPluginStarted, tenant: "_", data: `{"plugin":"x"}`},
		{note: "verification failed", event: gated.EventAuditVerificationFailed, tenant: "acme", data: `{"seq":7,"problem":"bad MAC"}`,
			want: notify.KindAuditVerificationFailed, summary: "audit stream message 7 did not verify: bad MAC"},
		{note: "own delivery", event: gated.EventNotifyDelivered, tenant: "acme", data: `{}`},
		{note: "own failure", event: gated.EventNotifyFailed, tenant: "acme", data: `{}`},
		{note: "received", event: gated.EventReceived, tenant: "acme", data: `{}`},
		{note: "data of wrong types", event: gated.EventVerdict, tenant: "acme", data: `{"outcome":7,"run":"x"}`, want: notify.KindDecided},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			id := "p1"
			if tc.tenant == "_" {
				id = ""
			}
			r := audit.NewRecord(42, gated.AuditEvent{V: 1, Event: tc.event, Tenant: tc.tenant, ProposalID: id,
				At: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Data: json.RawMessage(tc.data)})
			n, ok := notify.Classify(r)
			if ok != (tc.want != "") || n.Kind != tc.want {
				t.Fatalf("Classify = %q, %v; want %q", n.Kind, ok, tc.want)
			}
			if !ok {
				return
			}
			if tc.summary != "" && n.Summary != tc.summary {
				t.Errorf("summary %q, want %q", n.Summary, tc.summary)
			}
			if n.ID != "audit-42" || n.AuditSeq != 42 || n.Tenant != tc.tenant || n.Event != tc.event || string(n.Data) != tc.data {
				t.Errorf("notification %+v does not name its record", n)
			}
		})
	}
}

// TestPluginEventNames holds the plugin events the notifier spells to
// the plugin host's: a renamed event would silence plugin_down.
func TestPluginEventNames(t *testing.T) {
	for _, ev := range []string{plugins.EventPluginExited, plugins.EventPluginUnhealthy, plugins.EventPluginRefused} {
		r := audit.NewRecord(0, gated.AuditEvent{V: 1, Event: ev, Tenant: gated.UnknownTenant, Data: json.RawMessage(`{"plugin":"x"}`)})
		if n, ok := notify.Classify(r); !ok || n.Kind != notify.KindPluginDown {
			t.Errorf("%s makes %q, %v; want plugin_down", ev, n.Kind, ok)
		}
	}
}

func TestSlackBodyEscapes(t *testing.T) {
	n := notify.Notification{V: 1, ID: "audit-1", Kind: notify.KindTimeout, Tenant: "acme", ProposalID: "p1",
		Summary: "proposal <b>&</b> timed out", Event: gated.EventVerdict, AuditSeq: 1}
	body, err := n.Body(notify.FormatSlack)
	if err != nil {
		t.Fatal(err)
	}
	var msg struct {
		Text   string `json:"text"`
		Blocks []struct {
			Type string `json:"type"`
			Text struct {
				Text string `json:"text"`
			} `json:"text"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Blocks) != 2 || msg.Blocks[0].Type != "section" || msg.Blocks[0].Text.Text != "*timeout* proposal &lt;b&gt;&amp;&lt;/b&gt; timed out" {
		t.Errorf("slack body %s", body)
	}
	if !strings.HasPrefix(msg.Text, "gated: timeout: ") {
		t.Errorf("slack text %q", msg.Text)
	}
}

func TestVerifySignature(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	body := []byte(`{"v":1,"id":"audit-1"}`)
	now := time.Unix(1_900_000_000, 0)
	ts := "1900000000"
	sig := notify.Sign(secret, ts, body)
	cases := []struct {
		note, ts, sig string
		body          []byte
		secret        []byte
		want          string // "" for valid
	}{
		{note: "valid", ts: ts, sig: sig, body: body, secret: secret},
		{note: "tampered body", ts: ts, sig: sig, body: []byte(`{"v":1,"id":"audit-2"}`), secret: secret, want: "does not match"},
		{note: "other secret", ts: ts, sig: sig, body: body, secret: []byte("another-secret-0123456789abcdef!"), want: "does not match"},
		{note: "timestamp moved", ts: "1900000001", sig: sig, body: body, secret: secret, want: "does not match"},
		{note: "replayed later", ts: "1899999000", sig: notify.Sign(secret, "1899999000", body), body: body, secret: secret, want: "from now"},
		{note: "not a number", ts: "soon", sig: sig, body: body, secret: secret, want: "not Unix seconds"},
		{note: "no signature", ts: ts, sig: "", body: body, secret: secret, want: "does not match"},
	}
	for _, tc := range cases {
		t.Run(tc.note, func(t *testing.T) {
			err := notify.Verify(tc.secret, tc.ts, tc.sig, tc.body, now, 5*time.Minute)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// The vector docs/NOTIFICATIONS.md's Python verifier computes for the
	// same secret, timestamp and body.
	if want := "v1=6c9e4b52a66e4a741db057bd2341eee60406e37a8d853fb686860bda92e0907f"; sig != want {
		t.Errorf("signature %q, want %q", sig, want)
	}
}

// FuzzClassify: Classify reads any event's data through the event's type
// without failing, and a notification it makes names the record.
func FuzzClassify(f *testing.F) {
	f.Add(gated.EventVerdict, `{"outcome":"timeout","reason":"late"}`)
	f.Add(gated.EventVerdict, `{"outcome":"blocked","awaiting_operator":{"deadline":"2030-01-01T00:00:00Z"}}`)
	f.Add(gated.EventVerdict, `{"outcome":"rejected","run":{"run_id":"r","round":2,"next":"escalation","awaiting_operator":[1]}}`)
	f.Add(gated.EventOperatorAwaited, `{"deadline":"not a time","reason":7}`)
	f.Add(gated.EventPluginExited, `{"plugin":["x"],"why":"a\nb"}`)
	f.Add(gated.EventAuditVerificationFailed, `{"seq":-1,"problem":null}`)
	f.Fuzz(func(t *testing.T, event, data string) {
		r := audit.NewRecord(9, gated.AuditEvent{V: 1, Event: event, Tenant: "acme", ProposalID: "p1", Data: json.RawMessage(data)})
		if n, ok := notify.Classify(r); ok && (n.AuditSeq != 9 || n.Event != event || n.Summary == "") {
			t.Fatalf("notification %+v of %s %s", n, event, data)
		}
	})
}
