package notify

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gated/gated"
	"github.com/gated/gated/bus/audit"
)

// SchemaVersion is the "v" of a Notification.
const SchemaVersion = 1

// Notification is the body of a json sink's request, and what a slack
// sink's message is made from. One audit record makes at most one.
type Notification struct {
	V int `json:"v"`
	// ID identifies the notification: "audit-" and the stream sequence of
	// the record it comes from. A receiver that sees an ID twice got the
	// same notification again (a retry whose answer was lost, or a
	// redelivery after a restart) and can drop it.
	ID     string `json:"id"`
	Kind   Kind   `json:"kind"`
	Tenant string `json:"tenant"`
	// ProposalID and Action name the proposal, when the record is one's.
	ProposalID string `json:"proposal_id,omitempty"`
	Action     string `json:"action,omitempty"`
	// At is when gated recorded the event.
	At time.Time `json:"at"`
	// Summary is one line for a person.
	Summary string `json:"summary"`
	// Event and AuditSeq name the audit record: gated audit query finds
	// it, and gated audit verify checks it.
	Event    string `json:"event"`
	AuditSeq uint64 `json:"audit_seq"`
	// Data is the record's data, whole: for a verdict, the verdict.
	Data json.RawMessage `json:"data,omitempty"`
}

// recordData is what Classify reads of an event's data, through the
// event's type (gated.NewAuditEventData): members of unexpected types are
// left at their zero values, as a record gated wrote always decodes.
type recordData struct {
	head     gated.AuditHead
	verdict  gated.Verdict
	awaited  gated.OperatorAwaitedData
	plugin   gated.PluginEventData
	verified gated.AuditVerificationFailedData
}

func readData(ev gated.AuditEvent) recordData {
	var d recordData
	d.head, _ = gated.DecodeAuditData[gated.AuditHead](ev)
	switch ev.Event {
	case gated.EventVerdict:
		d.verdict, _ = gated.DecodeAuditData[gated.Verdict](ev)
	case gated.EventOperatorAwaited:
		d.awaited, _ = gated.DecodeAuditData[gated.OperatorAwaitedData](ev)
	case gated.EventPluginExited, gated.EventPluginUnhealthy, gated.EventPluginRefused:
		d.plugin, _ = gated.DecodeAuditData[gated.PluginEventData](ev)
	case gated.EventAuditVerificationFailed:
		d.verified, _ = gated.DecodeAuditData[gated.AuditVerificationFailedData](ev)
	}
	return d
}

// held tells whether a verdict waits for an operator.
func (d *recordData) held() bool {
	v := &d.verdict
	return v.AwaitingOperator != nil && *v.AwaitingOperator != (gated.OperatorHold{}) ||
		v.Run != nil && len(v.Run.AwaitingOperator) > 0
}

// Classify maps an audit record to the notification it makes, if any:
//
//   - operator.awaited: awaiting_operator;
//   - verdict.decided: timeout for outcome timeout, escalation for a run
//     verdict whose next step is an escalation, nothing for a verdict held
//     for an operator (its operator.awaited record, or the run's manual
//     criteria, tell), and decided for the others;
//   - plugin.exited, plugin.unhealthy and plugin.refused: plugin_down;
//   - audit.verification_failed: audit_verification_failed.
//
// Other records, notify.delivered and notify.failed included, make none.
// A record that holds several events makes the notification of the first
// that makes one: gated records at most one such event in a record (the
// verdict of a held action, which shares the record of its
// operator.awaited, makes none).
func Classify(r *audit.Record) (Notification, bool) {
	for _, ev := range r.Events() {
		if n, ok := classifyEvent(r.Seq, ev); ok {
			return n, true
		}
	}
	return Notification{}, false
}

// classifyEvent is Classify for one event of the record at seq.
func classifyEvent(seq uint64, ev gated.AuditEvent) (Notification, bool) {
	d := readData(ev)
	n := Notification{
		V: SchemaVersion, ID: "audit-" + strconv.FormatUint(seq, 10), Tenant: ev.Tenant,
		ProposalID: ev.ProposalID, Action: d.head.Action, At: ev.At.UTC(), Event: ev.Event, AuditSeq: seq, Data: ev.Data,
	}
	subject := proposalName(ev.Tenant, ev.ProposalID, d.head.Action)
	switch ev.Event {
	case gated.EventOperatorAwaited:
		n.Kind = KindAwaitingOperator
		n.Summary = subject + " waits for an operator"
		if !d.awaited.Deadline.IsZero() {
			n.Summary += " until " + d.awaited.Deadline.Format(time.RFC3339Nano)
		}
		if why := firstLine(d.awaited.Reason); why != "" {
			n.Summary += ": " + why
		}
	case gated.EventVerdict:
		switch {
		case d.verdict.Outcome == gated.OutcomeTimeout:
			n.Kind = KindTimeout
			n.Summary = subject + " timed out"
		case d.verdict.Run != nil && d.verdict.Run.Next == gated.NextEscalation:
			n.Kind = KindEscalation
			n.Summary = fmt.Sprintf("run %s of %s is escalated to a human after round %d", d.verdict.Run.RunID, ev.Tenant, d.verdict.Run.Round)
		case d.held():
			return Notification{}, false
		default:
			n.Kind = KindDecided
			n.Summary = subject + " is " + string(d.verdict.Outcome)
		}
		if why := firstLine(d.verdict.Reason); why != "" {
			n.Summary += ": " + why
		}
	case gated.EventPluginExited, gated.EventPluginUnhealthy, gated.EventPluginRefused:
		n.Kind = KindPluginDown
		what := map[string]string{
			gated.EventPluginExited:    "exited",
			gated.EventPluginUnhealthy: "missed its health checks and is relaunched",
			gated.EventPluginRefused:   "was refused at launch",
		}[ev.Event]
		n.Summary = fmt.Sprintf("reviewer plugin %s %s", orUnknown(d.plugin.Plugin), what)
		if why := firstLine(d.plugin.Why + "\n" + d.plugin.Error); why != "" {
			n.Summary += ": " + why
		}
	case gated.EventAuditVerificationFailed:
		n.Kind = KindAuditVerificationFailed
		n.Summary = fmt.Sprintf("audit stream message %d did not verify: %s", d.verified.Seq, firstLine(d.verified.Problem))
	default:
		return Notification{}, false
	}
	return n, true
}

func proposalName(tenant, id, action string) string {
	s := "proposal " + tenant + "." + id
	if action != "" {
		s += " (" + action + ")"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "(unnamed)"
	}
	return s
}

// firstLine is the first non-blank line of s, at most 240 bytes.
func firstLine(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			if len(line) > 240 {
				line = line[:240] + "…"
			}
			return line
		}
	}
	return ""
}

// Body encodes n in format f.
func (n *Notification) Body(f Format) ([]byte, error) {
	if f == FormatSlack {
		return json.Marshal(n.slack())
	}
	return json.Marshal(n)
}

// slackMessage is a Slack-compatible incoming webhook message.
type slackMessage struct {
	Text   string       `json:"text"`
	Blocks []slackBlock `json:"blocks"`
}

type slackBlock struct {
	Type     string      `json:"type"`
	Text     *slackText  `json:"text,omitempty"`
	Elements []slackText `json:"elements,omitempty"`
}

type slackText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (n *Notification) slack() slackMessage {
	context := fmt.Sprintf("tenant `%s`", slackEscape(n.Tenant))
	if n.ProposalID != "" {
		context += fmt.Sprintf(" · proposal `%s`", slackEscape(n.ProposalID))
	}
	context += fmt.Sprintf(" · %s · audit seq %d · %s", slackEscape(n.Event), n.AuditSeq, n.At.Format(time.RFC3339))
	return slackMessage{
		Text: "gated: " + string(n.Kind) + ": " + n.Summary,
		Blocks: []slackBlock{
			{Type: "section", Text: &slackText{Type: "mrkdwn", Text: "*" + string(n.Kind) + "* " + slackEscape(n.Summary)}},
			{Type: "context", Elements: []slackText{{Type: "mrkdwn", Text: context}}},
		},
	}
}

// slackEscape escapes the three characters Slack's mrkdwn reserves.
func slackEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
