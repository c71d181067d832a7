package gated_test

import data.gated

hold_rules(decision) := {h.rule | some h in decision.hold}

tenant_wide_drop := object.union(write_proposal, {"action": "db_drop_table", "class": "destructive", "blast_radius": "tenant_wide"})

test_hold_tenant_wide_destructive_when_configured if {
	d := gated.decision with input as {"proposal": tenant_wide_drop, "persona": reviewer}
		with data.gated.config.operator_holds as {"tenant_wide_destructive": true}
	hold_rules(d) == {"hold_tenant_wide_destructive"}
}

test_hold_nothing_by_default if {
	d := gated.decision with input as {"proposal": tenant_wide_drop, "persona": reviewer}
	count(d.hold) == 0
}

test_hold_not_a_cluster_change if {
	p := object.union(tenant_wide_drop, {"blast_radius": "cluster"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
		with data.gated.config.operator_holds as {"tenant_wide_destructive": true}
	count(d.hold) == 0
}

test_hold_listed_action_for_the_tenant_in_any_case if {
	every action in ["dns_delete_zone", "DNS_Delete_Zone"] {
		p := object.union(write_proposal, {"action": action})
		d := gated.decision with input as {"proposal": p, "persona": reviewer}
			with data.gated.config.operator_holds as {"actions": {"acme": ["dns_*"]}, "deadline": "15m"}
		d.hold == {{"rule": "hold_listed_action", "why": sprintf("%s is held for an operator by configuration (operator_holds.actions[\"acme\"] has \"dns_*\")", [action]), "deadline": "15m"}}
	}
}

test_hold_listed_action_not_for_another_tenant if {
	p := object.union(write_proposal, {"action": "dns_delete_zone", "tenant": "globex"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
		with data.gated.config.operator_holds as {"actions": {"acme": ["dns_*"]}}
	count(d.hold) == 0
}

test_hold_keeps_the_hard_rules if {
	# A held action that a hard rule denies is denied: the engine rejects
	# it and never holds it.
	p := with_flags(tenant_wide_drop, {"force_approve": true})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
		with data.gated.config.operator_holds as {"tenant_wide_destructive": true}
	"unsupported_force_approve" in rules(d)
	hold_rules(d) == {"hold_tenant_wide_destructive"}
}

test_hold_never_for_a_run if {
	d := gated.decision with input as run_input(run_proposal)
		with data.gated.config.operator_holds as {"actions": {"*": ["*"]}, "tenant_wide_destructive": true}
	d.hold == []
}

test_hold_bad_deadline_is_a_config_error if {
	errs := gated.config_errors with data.gated.config.operator_holds as {"deadline": "soon"}
	some e in errs
	contains(e, "operator_holds.deadline")
}
