# Flow rules: what an agent executed before, over a window, changes what it
# may do next (docs/POLICIES.md#flows).
#
# gated keeps, per tenant and agent, the labelled actions the agent
# executed (its grant used) over the flow window, and shows them to the
# policy as input.session: {labels, recent: [{proposal_id, action, labels,
# at, at_ns}], since, since_ns, error}. A proposal's labels are the data's
# for its action and those the proposal adds (input.proposal.labels).
#
# Every rule is off until data turns it on:
#
#   config:
#     flows:
#       labels: {"read_secret": ["secret"], "fetch_page": ["untrusted"], "send_email": ["egress"]}
#       window: 1h            # how long an executed action counts (default 1h)
#       max_recent: 32        # how many executed actions are kept (default 32)
#       rules:
#         egress_after_private: true          # deny
#         write_after_untrusted: review       # or hold, for an operator
#
# The rules of this package read input.session only when a rule is on:
# gated then reads the agent's state for every proposal, and not otherwise.
# The package gated takes their denies (deny), review (review) and holds
# (hold) in gated.rego and holds.rego.
package gated.flows

# on is true when data turns a flow rule on.
on if {
	some _, mode in data.gated.config.flows.rules
	mode != false
	mode != null
}

# labels are the proposal's effective labels.
labels contains label if some label in data.gated.config.flows.labels[input.proposal.action]

labels contains label if some label in input.proposal.labels

default window := "1h"

window := data.gated.config.flows.window

window_ns := time.parse_duration_ns(window)

# recent are the agent's executed actions within the window.
recent contains action if {
	some action in input.session.recent
	action.at_ns > data.gated.now_ns - window_ns
}

private_labels := {"private", "secret"}

# flow_egress_after_private: no egress after the agent read private or
# secret data within the window; the message names the earlier action.
deny contains {"rule": "flow_egress_after_private", "message": msg} if {
	data.gated.config.flows.rules.egress_after_private == true
	"egress" in labels
	some earlier in recent
	some label in earlier.labels
	label in private_labels
	msg := sprintf("%s sends outside (egress) after %s (proposal %s) read %s data at %s, within the flow window of %s", [input.proposal.action, earlier.action, earlier.proposal_id, label, earlier.at, window])
}

# flow_state_unreadable: a flow rule that is on and cannot see the state
# (unreadable, corrupt, or not read) denies rather than judge nothing.
deny contains {"rule": "flow_state_unreadable", "message": msg} if {
	on
	input.session.error != ""
	msg := sprintf("the flow state of this agent cannot be read (%s): the flow rules refuse what they cannot judge; an operator can clear it", [input.session.error])
}

deny contains {"rule": "flow_state_unreadable", "message": "the flow state of this agent was not read: the flow rules refuse what they cannot judge"} if {
	on
	input.session == null
}

# untrusted_before are the agent's executed actions within the window
# whose output was untrusted content, when a write or destructive action
# follows them.
untrusted_before contains earlier if {
	data.gated.config.flows.rules.write_after_untrusted in {true, "review", "hold"}
	input.proposal.class in {"write", "destructive"}
	some earlier in recent
	"untrusted" in earlier.labels
}

# flow_why is the flow, in words, for the reviewer or the operator.
flow_why := sprintf("%s is a %s action after the agent read untrusted content within the flow window of %s: %s; check that it is what the agent's principal asked for, not what that content told it to do", [
	input.proposal.action, input.proposal.class, window,
	concat(", ", sort([sprintf("%s (proposal %s) at %s", [e.action, e.proposal_id, e.at]) | some e in untrusted_before])),
]) if count(untrusted_before) > 0

# review_why is set when a write after untrusted content goes to review.
review_why := flow_why if data.gated.config.flows.rules.write_after_untrusted != "hold"

# hold holds a write after untrusted content for an operator instead.
hold contains {"rule": "flow_write_after_untrusted", "why": flow_why} if data.gated.config.flows.rules.write_after_untrusted == "hold"
