# Operator holds: actions a person decides instead of a reviewer.
package gated

# hold lists the reasons to hold an action for an operator decision, each
# {"rule", "why"} with an optional "deadline" (a duration such as "15m"
# that shortens gated's --operator-deadline; a longer one changes
# nothing). The hard rules run first: an action any rule denies is
# rejected, never held. A held action's verdict is blocked, awaiting an
# operator, until a signed operator decision approves or rejects it, or the
# deadline passes (timeout, never an approval). Authors add their own
# reasons with `hold contains {...} if {...}` in files of package gated.
#
# The default bundle holds nothing until configured:
#
#   operator_holds:
#     tenant_wide_destructive: true       # every tenant_wide destructive change
#     actions: {"*": ["db_drop_*"], "acme": ["dns_*"]}   # per tenant, "*" for all
#     deadline: 30m                        # optional, shorter than the default

# hold_tenant_wide_destructive: a destructive change to a whole tenant
# needs a person.
hold contains object.union(
	{"rule": "hold_tenant_wide_destructive", "why": sprintf("%s is a destructive change to the whole tenant", [input.proposal.action])},
	hold_deadline,
) if {
	input.proposal.class == "destructive"
	input.proposal.blast_radius == "tenant_wide"
	data.gated.config.operator_holds.tenant_wide_destructive == true
}

# hold_listed_action: config.operator_holds.actions maps a tenant (or "*"
# for every tenant) to action patterns a person decides, matched like a
# denylist (glob.match, null delimiters, any case): a list that matches more
# is the safe direction.
hold contains object.union(
	{"rule": "hold_listed_action", "why": sprintf("%s is held for an operator by configuration (operator_holds.actions[%q] has %q)", [input.proposal.action, scope, pattern])},
	hold_deadline,
) if {
	some scope in [input.proposal.tenant, "*"]
	some pattern in data.gated.config.operator_holds.actions[scope]
	glob.match(lower(pattern), null, lower(input.proposal.action))
}

# flow_write_after_untrusted (flows.rego), when data asks for a hold.
hold contains object.union(held, hold_deadline) if {
	data.gated.flows.on
	some held in data.gated.flows.hold
}

# hold_deadline is the configured deadline of the default holds, if any.
hold_deadline := {"deadline": data.gated.config.operator_holds.deadline} if {
	is_string(data.gated.config.operator_holds.deadline)
} else := {}

configured_action_patterns contains [sprintf("data.gated.config.operator_holds.actions.%v[%v]", [scope, j]), pattern] if {
	some scope, patterns in data.gated.config.operator_holds.actions
	is_array(patterns)
	some j, pattern in patterns
}

config_errors contains sprintf("data.gated.config.operator_holds.deadline: %s: want a duration such as \"30m\"", [json.marshal(d)]) if {
	d := data.gated.config.operator_holds.deadline
	not valid_hold_deadline(d)
}

valid_hold_deadline(d) if {
	is_string(d)
	time.parse_duration_ns(d) > 0
}
