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
