# The hard rules: refusals that no operator, agent or model can override.
package gated

# no_skip_review: flags.skip_review is refused for everyone, admins included.
# Waiving review exists only as configuration (config.skip_review_actions).
deny contains {"rule": "no_skip_review", "message": msg} if {
	input.proposal.flags.skip_review == true
	msg := sprintf(
		"flags.skip_review is refused for every operator, admins included (operator %q, roles %v); review can only be waived by configuration",
		[object.get(input.proposal, ["operator", "id"], ""), object.get(input.proposal, ["operator", "roles"], [])],
	)
}

# unsupported_force_approve: no proposal can approve itself.
deny contains {"rule": "unsupported_force_approve", "message": msg} if {
	input.proposal.flags.force_approve == true
	msg := "flags.force_approve is not supported: a proposal cannot approve itself"
}

# force_approve_no_sop is accepted only in the narrow case where no SOP covers
# the action, the target is production-tagged and a human confirmed. It never
# skips review: it tells the reviewer the no-SOP case was confirmed.
deny contains {"rule": "unsupported_force_approve", "message": msg} if {
	input.proposal.flags.force_approve_no_sop == true
	count(force_approve_no_sop_failures) > 0
	msg := sprintf(
		"flags.force_approve_no_sop is accepted only when no SOP covers the action, the target is production-tagged and flags.user_confirmed is true; here %s",
		[concat(", ", force_approve_no_sop_failures)],
	)
}

force_approve_no_sop_failures contains sprintf("SOP %s covers %s", [covering_sop.id, input.proposal.action]) if sop_covers

force_approve_no_sop_failures contains "the target is not production-tagged" if not production_target

force_approve_no_sop_failures contains "flags.user_confirmed is not true" if not input.proposal.flags.user_confirmed == true

# --- reviewer tool bags ------------------------------------------------------

# Tools that can never reach a reviewer, whatever its persona or the tool
# catalog say: names, and wildcard patterns matched with glob.match and null
# delimiters (so "*_skill" also catches "ns.web_skill").
baseline_denied_names := {"run_shell", "execute_skill", "host_restart_service", "kill_process"}

baseline_denied_patterns := ["*_skill"]

# denied_tools: the persona's tools that the reviewer does not get.
# A tool the catalog does not list as read is denied: reviewers only read.
denied_tools contains tool if {
	some tool in input.persona.tools
	not data.gated.tools[tool].class == "read"
}

denied_tools contains tool if {
	some tool in input.persona.tools
	tool in baseline_denied_names
}

denied_tools contains tool if {
	some tool in input.persona.tools
	some pattern in baseline_denied_patterns
	glob.match(pattern, null, tool)
}

# The persona's own disallowed_tools are wildcard patterns too.
denied_tools contains tool if {
	some tool in input.persona.tools
	some pattern in input.persona.disallowed_tools
	glob.match(pattern, null, tool)
}

# reviewer_tools is the effective tool bag sent with the review.
reviewer_tools := [tool | some tool in input.persona.tools; not tool in denied_tools]

# reviewer_tool_denied: a persona that is not read-only cannot review at all.
deny contains {"rule": "reviewer_tool_denied", "message": msg} if {
	is_object(input.persona)
	not input.persona.permission_mode == "read-only"
	review.required
	msg := sprintf(
		"persona %q has permission_mode %q; only read-only personas may review",
		[object.get(input.persona, "name", ""), object.get(input.persona, "permission_mode", "")],
	)
}

# class_mismatch: an action the tool catalog lists as mutating cannot be
# declared read to skip review.
deny contains {"rule": "class_mismatch", "message": msg} if {
	input.proposal.class == "read"
	catalog_class := data.gated.tools[input.proposal.action].class
	catalog_class != "read"
	msg := sprintf("%s is declared read, but the tool catalog lists it as %s", [input.proposal.action, catalog_class])
}

# self_review: the reviewer may not be the agent that proposes. A run is
# not denied for it: its review is blocked instead (review.blocked, see
# runs.rego), since the run itself may be fine.
deny contains {"rule": "self_review", "message": msg} if {
	agent := input.proposal.requested_by.agent
	agent != ""
	agent in reviewer_identities
	input.proposal.kind != "run"
	review.required
	msg := sprintf("agent %q proposed this change and may not review it", [agent])
}

# reviewer_identities are the names the routed reviewer acts under.
reviewer_identities contains input.persona.name

reviewer_identities contains input.persona.plugin
