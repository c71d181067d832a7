package gated_test

import data.gated

test_read_needs_no_review if {
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	count(d.deny) == 0
	d.review.required == false
}

test_write_needs_review_by_default_persona if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer}
	d.review == {"required": true, "persona": "reviewer", "quorum": 1, "why": "write actions need review"}
}

test_destructive_needs_review if {
	p := object.union(write_proposal, {"class": "destructive"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.required
}

test_proposal_chooses_persona if {
	p := object.union(write_proposal, {"reviewer": "dba"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.persona == "dba"
}

test_covering_sop_is_reported if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer}
	d.sop.id == "SOP-001"
}

test_sop_patterns_are_wildcards if {
	p := object.union(write_proposal, {"action": "rotate_db_credentials"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.sop.id == "SOP-003"
}

test_no_sop_is_null if {
	p := object.union(write_proposal, {"action": "db_vacuum_table"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.sop == null
}

test_missing_persona_still_decides if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": null}
	d.review.required
	d.reviewer_tools == []
}

test_read_of_unknown_action_is_reviewed if {
	p := object.union(write_proposal, {"class": "read", "action": "db_export_everything"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	count(d.deny) == 0
	d.review.required
}

test_read_claim_on_mutating_action_is_denied if {
	p := object.union(write_proposal, {"class": "read", "action": "host_restart_service"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"class_mismatch" in rules(d)
}

test_tenant_wide_needs_quorum_of_two if {
	p := object.union(write_proposal, {"blast_radius": "tenant_wide"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.quorum == 2
}

test_tenant_wide_quorum_is_configurable if {
	p := object.union(write_proposal, {"blast_radius": "tenant_wide"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
		with data.gated.config.tenant_wide_quorum as 3
	d.review.quorum == 3
}

test_single_device_quorum_is_one if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer}
	d.review.quorum == 1
}

test_self_review_denied if {
	p := object.union(write_proposal, {"requested_by": {"agent": "reviewer", "session": "s"}})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	"self_review" in rules(d)
}

test_other_agent_is_not_self_review if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer}
	not "self_review" in rules(d)
}
