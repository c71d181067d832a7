# Operational rules: what a tenant may do, and when.
package gated

# --- denied_action -----------------------------------------------------------

# denied_action: config.denied_actions maps a tenant (or "*" for every
# tenant) to action patterns that tenant may never run, matched with
# glob.match and null delimiters, in any case: a denylist that matches more
# is the safe direction, and web_SKILL is no other action than web_skill
# to a reader:
#
#   denied_actions: {"*": ["db_drop_*"], "acme": ["*_skill"]}
deny contains {"rule": "denied_action", "message": msg} if {
	some scope in [input.proposal.tenant, "*"]
	some pattern in data.gated.config.denied_actions[scope]
	glob.match(lower(pattern), null, lower(input.proposal.action))
	msg := sprintf("%s is denied for %s by configuration (denied_actions[%q] has %q)", [input.proposal.action, tenant_scope(scope), scope, pattern])
}

tenant_scope("*") := "every tenant"

tenant_scope(scope) := sprintf("tenant %s", [scope]) if scope != "*"

# --- parallel_operation and target_cooldown ----------------------------------

# input.history holds the recent verdicts on the proposal's tenant and
# target, newest last. Two windows apply to an approved mutating action on
# the same target:
#
# - parallel_operation (config.parallel_operation_window, default 10m): an
#   operation approved for another agent may still be running, and this
#   agent cannot know when it ends.
# - target_cooldown (config.target_cooldown, default 5m): the agent's own
#   earlier operation has finished from its point of view, but its effects
#   need time to show before the same target is changed again.
#
# A proposal without requested_by.agent counts as another agent.

default parallel_operation_window := "10m"

parallel_operation_window := data.gated.config.parallel_operation_window

default target_cooldown := "5m"

target_cooldown := data.gated.config.target_cooldown

deny contains {"rule": "parallel_operation", "message": msg} if {
	mutating
	some h in input.history
	h.outcome == "approved"
	h.proposal_id != input.proposal.id
	not same_agent(h)
	age := now_ns - h.decided_at_ns
	age < time.parse_duration_ns(parallel_operation_window)
	msg := sprintf(
		"%s on the same target was approved %s ago for %s (proposal %s); no parallel operation for %s",
		[h.action, seconds(age), agent_name(object.get(h, "agent", "")), h.proposal_id, parallel_operation_window],
	)
}

deny contains {"rule": "target_cooldown", "message": msg} if {
	mutating
	some h in input.history
	h.outcome == "approved"
	h.proposal_id != input.proposal.id
	same_agent(h)
	age := now_ns - h.decided_at_ns
	age < time.parse_duration_ns(target_cooldown)
	msg := sprintf(
		"this agent's %s on the same target was approved %s ago (proposal %s); the target cools down for %s",
		[h.action, seconds(age), h.proposal_id, target_cooldown],
	)
}

same_agent(h) if {
	agent := input.proposal.requested_by.agent
	agent != ""
	h.agent == agent
}

agent_name("") := "an unnamed agent"

agent_name(agent) := sprintf("agent %s", [agent]) if agent != ""

seconds(ns) := sprintf("%ds", [round(ns / 1000000000)])

# --- recent_failure ----------------------------------------------------------

# recent_failure (config.recent_failure_window, default 1h): executors
# report what happened to the actions gated approved (docs/GRANTS.md,
# outcomes), and gated keeps the last report on the approval's entry of
# the target's history as h.execution = {status, at, at_ns, error}. A
# mutating action is denied when the newest approval of the same action
# on the same target whose run finished (succeeded or failed) failed
# within the window: trying the same change again right after it broke
# the target is for a human to decide. A later run that succeeded clears
# it; an approval that never ran, or has only started, neither clears nor
# counts. The window cannot reach further back than the history gated
# keeps (an hour of approvals and of reported outcomes, 32 entries).

default recent_failure_window := "1h"

recent_failure_window := data.gated.config.recent_failure_window

deny contains {"rule": "recent_failure", "message": msg} if {
	mutating
	finished := [h |
		some h in input.history
		h.outcome == "approved"
		h.action == input.proposal.action
		h.proposal_id != input.proposal.id
		h.execution.status in {"succeeded", "failed"}
	]
	count(finished) > 0
	last := finished[count(finished) - 1]
	last.execution.status == "failed"
	age := now_ns - last.execution.at_ns
	age < time.parse_duration_ns(recent_failure_window)
	msg := sprintf(
		"the last approved %s on the same target (proposal %s) failed %s ago (%s); no new attempt within %s of a failure",
		[last.action, last.proposal_id, seconds(age), object.get(last.execution, "error", ""), recent_failure_window],
	)
}

# --- change_freeze -----------------------------------------------------------

# change_freeze: config.change_freezes lists windows in which mutating
# actions are refused:
#
#   change_freezes:
#     - name: year-end
#       start: "2026-12-20T00:00:00Z"     # RFC 3339, inclusive
#       end: "2027-01-04T00:00:00Z"       # RFC 3339, exclusive
#       tenants: ["acme"]                 # optional: default every tenant
#       actions: ["host_*"]               # optional patterns, any case: default every action
#       allow_incidents: true             # optional: proposals with an incident_id pass
#       reason: "year-end change freeze"  # optional
deny contains {"rule": "change_freeze", "message": msg} if {
	mutating
	some window in data.gated.config.change_freezes
	freeze_covers_tenant(window)
	freeze_covers_action(window)
	time.parse_rfc3339_ns(window.start) <= now_ns
	now_ns < time.parse_rfc3339_ns(window.end)
	not incident_exempt(window)
	msg := sprintf("change freeze %q is in force until %s%s", [window.name, window.end, freeze_reason(window)])
}

freeze_covers_tenant(window) if not window.tenants

freeze_covers_tenant(window) if input.proposal.tenant in window.tenants

freeze_covers_action(window) if not window.actions

freeze_covers_action(window) if {
	some pattern in window.actions
	glob.match(lower(pattern), null, lower(input.proposal.action))
}

incident_exempt(window) if {
	window.allow_incidents == true
	is_string(input.proposal.incident_id)
	input.proposal.incident_id != ""
}

freeze_reason(window) := sprintf(": %s", [window.reason]) if {
	is_string(window.reason)
	window.reason != ""
} else := ""

# --- data validation ---------------------------------------------------------

# config_errors lists problems with data.gated.config. gated evaluates it
# when a bundle is loaded and refuses a bundle with any entry, so a typo in
# a freeze window fails at start-up rather than on the first proposal.
# Authors may add their own entries for their own data.
config_errors contains sprintf("data.gated.config.%s: %s is not a duration such as \"10m\"", [key, json.marshal(value)]) if {
	some key in ["parallel_operation_window", "target_cooldown", "recent_failure_window"]
	value := data.gated.config[key]
	not valid_duration(value)
}

config_errors contains sprintf("data.gated.config.change_freezes[%d].%s: %s is not an RFC 3339 time", [i, key, json.marshal(value)]) if {
	some i, window in data.gated.config.change_freezes
	some key in ["start", "end"]
	value := object.get(window, key, null)
	not valid_time(value)
}

config_errors contains sprintf("data.gated.config.change_freezes[%d]: end %s is not after start %s", [i, window.end, window.start]) if {
	some i, window in data.gated.config.change_freezes
	valid_time(window.start)
	valid_time(window.end)
	time.parse_rfc3339_ns(window.end) <= time.parse_rfc3339_ns(window.start)
}

config_errors contains sprintf("data.gated.config.change_freezes[%d].name: want a non-empty string", [i]) if {
	some i, window in data.gated.config.change_freezes
	not valid_name(window)
}

config_errors contains sprintf("data.gated.config.denied_actions.%s: want an array of action patterns", [scope]) if {
	some scope, patterns in data.gated.config.denied_actions
	not is_array(patterns)
}

config_errors contains sprintf("data.gated.config.tenant_wide_quorum: %s is not an integer from 1 to 16", [json.marshal(q)]) if {
	q := data.gated.config.tenant_wide_quorum
	not valid_quorum(q)
}

valid_duration(value) if {
	is_string(value)
	time.parse_duration_ns(value) > 0
}

valid_time(value) if {
	is_string(value)
	time.parse_rfc3339_ns(value)
}

valid_name(window) if {
	is_string(window.name)
	window.name != ""
}

valid_quorum(q) if {
	is_number(q)
	q == round(q)
	q >= 1
	q <= 16
}
