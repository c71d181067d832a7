package gated_test

import data.gated

# A reviewer persona as the built-in one looks.
reviewer := {
	"name": "reviewer",
	"permission_mode": "read-only",
	"tools": ["get_sop_text", "get_verdict_history", "get_proposal"],
	"disallowed_tools": [],
}

write_proposal := {
	"v": 1,
	"id": "p1",
	"tenant": "acme",
	"kind": "action",
	"action": "host_restart_service",
	"class": "write",
	"target": {"device_id": 7, "service": "nginx", "tags": ["production"]},
	"reason": "nginx is wedged",
	"blast_radius": "single_device",
	"operator": {"id": "alice", "roles": ["sre"]},
	"requested_by": {"agent": "ops-agent", "session": "s1"},
	"flags": {"skip_review": false, "force_approve": false, "force_approve_no_sop": false, "user_confirmed": false},
	"reviewer": "",
}

with_flags(p, f) := object.union(p, {"flags": object.union(p.flags, f)})

rules(decision) := {d.rule | some d in decision.deny}

# --- no_skip_review ----------------------------------------------------------

test_no_skip_review_denies_admin if {
	p := object.union(with_flags(write_proposal, {"skip_review": true}), {"operator": {"id": "root", "roles": ["admin"]}})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"no_skip_review" in rules(d)
}

test_no_skip_review_denies_read_actions_too if {
	p := object.union(with_flags(write_proposal, {"skip_review": true}), {"class": "read"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"no_skip_review" in rules(d)
}

test_no_skip_review_quiet_without_flag if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer}
	not "no_skip_review" in rules(d)
}

test_configured_skip_is_not_a_deny if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer}
		with data.gated.config.skip_review_actions as ["host_restart_*"]
	count(d.deny) == 0
	d.review.required == false
	d.skipped == true
}

# --- unsupported_force_approve -----------------------------------------------

test_force_approve_always_denied if {
	p := with_flags(write_proposal, {"force_approve": true, "user_confirmed": true})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"unsupported_force_approve" in rules(d)
}

no_sop_proposal := object.union(write_proposal, {"action": "db_vacuum_table"})

test_force_approve_no_sop_allowed_in_narrow_case if {
	p := with_flags(no_sop_proposal, {"force_approve_no_sop": true, "user_confirmed": true})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	count(d.deny) == 0
	d.review.required # it never skips review
}

test_force_approve_no_sop_denied_when_sop_covers if {
	p := with_flags(write_proposal, {"force_approve_no_sop": true, "user_confirmed": true})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"unsupported_force_approve" in rules(d)
}

test_force_approve_no_sop_denied_without_confirmation if {
	p := with_flags(no_sop_proposal, {"force_approve_no_sop": true})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"unsupported_force_approve" in rules(d)
}

test_force_approve_no_sop_denied_off_production if {
	p := object.union(
		with_flags(no_sop_proposal, {"force_approve_no_sop": true, "user_confirmed": true}),
		{"target": {"service": "nginx", "tags": ["staging"]}},
	)
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"unsupported_force_approve" in rules(d)
}

test_production_environment_counts_as_production if {
	p := object.union(
		with_flags(no_sop_proposal, {"force_approve_no_sop": true, "user_confirmed": true}),
		{"target": {"environment": "prod"}},
	)
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	count(d.deny) == 0
}

# --- reviewer_tool_denied ----------------------------------------------------

test_reviewer_tools_drop_skills_and_write_tools if {
	persona := object.union(reviewer, {"tools": [
		"get_sop_text", "web_skill", "ns.web_skill", "run_shell", "execute_skill",
		"host_restart_service", "kill_process", "host_list_services", "mystery_tool",
	]})
	d := gated.decision with input as {"proposal": write_proposal, "persona": persona}
	d.reviewer_tools == ["get_sop_text", "host_list_services"]
	d.denied_tools == {
		"execute_skill", "host_restart_service", "kill_process", "mystery_tool",
		"ns.web_skill", "run_shell", "web_skill",
	}
	count(d.deny) == 0
}

# The baseline denylist holds whatever the tool catalog says: a catalog
# that lists a skill or a shell as read does not hand it to a reviewer.
catalog_listing_everything_read := {name: {"class": "read"} | some name in [
	"get_sop_text", "deploy_skill", "ns.market_skill", "run_shell",
	"execute_skill", "host_restart_service", "kill_process",
]}

test_baseline_denylist_overrides_a_catalog_that_says_read if {
	persona := object.union(reviewer, {"tools": [
		"get_sop_text", "deploy_skill", "ns.market_skill", "run_shell",
		"execute_skill", "host_restart_service", "kill_process",
	]})
	d := gated.decision with input as {"proposal": write_proposal, "persona": persona}
		with data.gated.tools as catalog_listing_everything_read
	d.reviewer_tools == ["get_sop_text"]
	d.denied_tools == {
		"deploy_skill", "execute_skill", "host_restart_service", "kill_process",
		"ns.market_skill", "run_shell",
	}
	count(d.deny) == 0
}

test_skill_wildcard_overrides_a_catalog_that_says_read if {
	persona := object.union(reviewer, {"tools": ["get_sop_text", "deploy_skill"]})
	d := gated.decision with input as {"proposal": write_proposal, "persona": persona}
		with data.gated.tools as catalog_listing_everything_read
	d.reviewer_tools == ["get_sop_text"]
	d.denied_tools == {"deploy_skill"}
}

test_persona_disallowed_tools_are_wildcards if {
	persona := object.union(reviewer, {"disallowed_tools": ["get_verdict_*"]})
	d := gated.decision with input as {"proposal": write_proposal, "persona": persona}
	d.reviewer_tools == ["get_sop_text", "get_proposal"]
	"get_verdict_history" in d.denied_tools
}

test_write_persona_cannot_review if {
	persona := object.union(reviewer, {"permission_mode": "default"})
	d := gated.decision with input as {"proposal": write_proposal, "persona": persona}
	"reviewer_tool_denied" in rules(d)
}

test_write_persona_irrelevant_for_reads if {
	persona := object.union(reviewer, {"permission_mode": "default"})
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as {"proposal": p, "persona": persona}
	count(d.deny) == 0
}
