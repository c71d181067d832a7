# The hard rules: refusals that no operator, agent or model can override.
package gated

# no_skip_review: flags.skip_review is refused for everyone, admins included.
# Waiving review exists only as configuration (config.skip_review_actions).
deny contains {"rule": "no_skip_review", "message": msg} if {
	flags.skip_review == true
	msg := sprintf(
		"flags.skip_review is refused for every operator, admins included (operator %q, roles %v); review can only be waived by configuration",
		[object.get(proposal, ["operator", "id"], ""), object.get(proposal, ["operator", "roles"], [])],
	)
}

# unsupported_force_approve: no proposal can approve itself.
deny contains {"rule": "unsupported_force_approve", "message": msg} if {
	flags.force_approve == true
	msg := "flags.force_approve is not supported: a proposal cannot approve itself"
}

# force_approve_no_sop is accepted only in the narrow case where no SOP covers
# the action, the target is production-tagged and a human confirmed. It never
# skips review: it tells the reviewer the no-SOP case was confirmed.
deny contains {"rule": "unsupported_force_approve", "message": msg} if {
	flags.force_approve_no_sop == true
	count(force_approve_no_sop_failures) > 0
	msg := sprintf(
		"flags.force_approve_no_sop is accepted only when no SOP covers the action, the target is production-tagged and flags.user_confirmed is true; here %s",
		[concat(", ", sort(force_approve_no_sop_failures))],
	)
}

force_approve_no_sop_failures contains sprintf("SOP %s covers %s", [covering_sop.id, proposal.action]) if sop_covers

force_approve_no_sop_failures contains "the target is not production-tagged" if not production_target

force_approve_no_sop_failures contains "flags.user_confirmed is not true" if flags.user_confirmed != true

# --- reviewer tool bags ------------------------------------------------------

# baseline_denied_tools can never reach a reviewer, whatever its persona says.
baseline_denied_tools := ["*_skill", "run_shell", "execute_skill", "host_restart_service", "kill_process"]

persona_tools := input.persona.tools if is_array(input.persona.tools) else := []

persona_disallowed := input.persona.disallowed_tools if is_array(input.persona.disallowed_tools) else := []

# denied_tools: persona tools matching a baseline or persona pattern
# (glob.match with null delimiters, so "*_skill" also catches "ns.web_skill"),
# and every tool the catalog does not list as a read tool.
denied_tools contains tool if {
	some tool in persona_tools
	some pattern in array.concat(baseline_denied_tools, persona_disallowed)
	glob.match(pattern, null, tool)
}

denied_tools contains tool if {
	some tool in persona_tools
	object.get(tool_catalog, [tool, "class"], "unknown") != "read"
}

# reviewer_tools is the effective tool bag sent with the review.
reviewer_tools := sort({tool | some tool in persona_tools; not tool in denied_tools})

# reviewer_tool_denied: a persona that is not read-only cannot review at all.
deny contains {"rule": "reviewer_tool_denied", "message": msg} if {
	review.required
	input.persona != null
	object.get(input.persona, "permission_mode", "") != "read-only"
	msg := sprintf(
		"persona %q has permission_mode %q; only read-only personas may review",
		[object.get(input.persona, "name", ""), object.get(input.persona, "permission_mode", "")],
	)
}

# class_mismatch: an action the tool catalog lists as mutating cannot be
# declared read to skip review.
deny contains {"rule": "class_mismatch", "message": msg} if {
	proposal.class == "read"
	catalog_class := object.get(tool_catalog, [proposal.action, "class"], "unknown")
	catalog_class != "unknown"
	catalog_class != "read"
	msg := sprintf("%s is declared read, but the tool catalog lists it as %s", [proposal.action, catalog_class])
}

# self_review: the reviewer may not be the agent that proposes.
deny contains {"rule": "self_review", "message": msg} if {
	review.required
	input.persona != null
	agent := object.get(proposal, ["requested_by", "agent"], "")
	agent != ""
	agent in {object.get(input.persona, "name", ""), object.get(input.persona, "plugin", "")}
	msg := sprintf("agent %q proposed this change and may not review it", [agent])
}
