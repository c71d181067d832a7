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
	d.review == {"required": true, "persona": "reviewer", "quorum": 1, "why": "write actions need review", "rule": "route_class"}
}

test_destructive_needs_review if {
	p := object.union(write_proposal, {"class": "destructive"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.required
}

test_proposal_reviewer_adds_to_the_default_persona if {
	p := object.union(write_proposal, {"reviewer": "incident"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.persona == "reviewer"
	d.review.also == ["incident"]
	d.review.quorum == 2
}

test_proposal_reviewer_fills_a_tenant_wide_quorum_beside_the_default if {
	p := object.union(write_proposal, {"reviewer": "incident", "blast_radius": "tenant_wide"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.persona == "reviewer"
	d.review.also == ["incident"]
	d.review.quorum == 2
}

test_proposal_naming_the_routed_persona_adds_nobody if {
	p := object.union(write_proposal, {"reviewer": "reviewer"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review == {"required": true, "persona": "reviewer", "quorum": 1, "why": "write actions need review", "rule": "route_class"}
}

overrides := [{"actions": ["host_restart_service"], "personas": ["incident"]}]

test_reviewer_override_replaces_the_persona_for_its_actions if {
	p := object.union(write_proposal, {"reviewer": "incident"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer} with data.gated.config.reviewer_overrides as overrides
	d.review == {"required": true, "persona": "incident", "quorum": 1, "why": "write actions need review", "rule": "route_class"}
}

test_reviewer_override_is_narrow if {
	# Another persona, or another action, is still added, not swapped in.
	other := object.union(write_proposal, {"reviewer": "oncall"})
	d1 := gated.decision with input as {"proposal": other, "persona": reviewer} with data.gated.config.reviewer_overrides as overrides
	d1.review.persona == "reviewer"
	d1.review.also == ["oncall"]
	action := object.union(write_proposal, {"reviewer": "incident", "action": "host_restart_service_and_wipe"})
	d2 := gated.decision with input as {"proposal": action, "persona": reviewer} with data.gated.config.reviewer_overrides as overrides
	d2.review.persona == "reviewer"
	d2.review.also == ["incident"]
}

test_reviewer_overrides_config_errors if {
	errs := gated.config_errors with data.gated.config.reviewer_overrides as [
		{"actions": ["host_restart_service"], "personas": ["incident"]},
		{"actions": ["host_restart_service"]},
		{"actions": [], "personas": ["incident"]},
		{"actions": ["x"], "personas": [""]},
		{"actions": ["x"], "personas": ["incident"], "tenants": ["acme"]},
		"host_restart_service",
	]
	count(errs) == 5
	every i in [1, 2, 3, 4, 5] {
		some msg in errs
		startswith(msg, sprintf("data.gated.config.reviewer_overrides[%d]: ", [i]))
	}
	not_a_list := gated.config_errors with data.gated.config.reviewer_overrides as {"host_restart_service": "incident"}
	not_a_list == {`data.gated.config.reviewer_overrides: want a list of {"actions": [patterns], "personas": [names]}`}
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

# --- routing by action -------------------------------------------------------

dba := object.union(reviewer, {"name": "dba", "plugin": "sop"})

db_proposal := object.union(write_proposal, {"action": "db_migrate_schema", "target": {"database": "orders", "tags": ["production"]}})

test_database_action_routes_to_dba if {
	d := gated.decision with input as {"proposal": db_proposal, "persona": reviewer}
	d.review.persona == "dba"
	d.review.required
}

test_routed_persona_reviews_its_actions if {
	d := gated.decision with input as {"proposal": db_proposal, "persona": dba}
	count(d.deny) == 0
	d.review.persona == "dba"
}

test_route_matches_an_action_in_any_case if {
	p := object.union(db_proposal, {"action": "DB_Drop_Table"})
	d := gated.decision with input as {"proposal": p, "persona": dba}
	d.review.persona == "dba"
}

test_route_outranks_the_proposals_reviewer if {
	p := object.union(db_proposal, {"reviewer": "reviewer"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.persona == "dba"
}

test_route_outranks_the_proposals_reviewer_which_is_added if {
	p := object.union(db_proposal, {"reviewer": "ops"})
	d := gated.decision with input as {"proposal": p, "persona": dba}
	d.review.persona == "dba"
	d.review.also == ["ops"]
}

test_routes_are_configurable if {
	routes := [{"actions": ["k8s_*", "helm_*"], "persona": "platform"}]
	k8s := object.union(write_proposal, {"action": "helm_upgrade"})
	d := gated.decision with input as {"proposal": k8s, "persona": reviewer} with data.gated.config.persona_routes as routes
	d.review.persona == "platform"

	# Configured routes replace the default ones.
	db := gated.decision with input as {"proposal": db_proposal, "persona": reviewer} with data.gated.config.persona_routes as routes
	db.review.persona == "reviewer"
}

test_first_matching_route_wins if {
	routes := [{"actions": ["db_migrate_*"], "persona": "migrations"}, {"actions": ["db_*"], "persona": "dba"}]
	d := gated.decision with input as {"proposal": db_proposal, "persona": reviewer} with data.gated.config.persona_routes as routes
	d.review.persona == "migrations"
}

test_empty_routes_turn_routing_off if {
	d := gated.decision with input as {"proposal": db_proposal, "persona": reviewer} with data.gated.config.persona_routes as []
	d.review.persona == "reviewer"
	count(d.deny) == 0
}

test_routed_persona_out_of_scope_is_denied if {
	# As a quorum candidate for a host change, or added by the agent.
	p := object.union(write_proposal, {"reviewer": "dba"})
	d := gated.decision with input as {"proposal": p, "persona": dba}
	"persona_out_of_scope" in rules(d)
	d.review.persona == "reviewer"
	d.review.also == ["dba"]
}

test_general_persona_may_review_routed_actions if {
	# The reviewer may join dba in a quorum on a database change.
	d := gated.decision with input as {"proposal": db_proposal, "persona": reviewer}
	not "persona_out_of_scope" in rules(d)
}

test_out_of_scope_needs_a_review_to_deny if {
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as {"proposal": p, "persona": dba}
	count(d.deny) == 0
	not d.review.required
}

test_persona_routes_config_errors if {
	errs := gated.config_errors with data.gated.config.persona_routes as [
		{"actions": ["db_*"], "persona": "dba"},
		{"actions": "db_*", "persona": "dba"},
		{"actions": ["db_*"]},
		{"actions": [], "persona": "dba"},
		{"actions": [7], "persona": "dba"},
	]
	count(errs) == 5
	every i in [1, 2, 3, 4] {
		some msg in errs
		startswith(msg, sprintf("data.gated.config.persona_routes[%d]: ", [i]))
	}
	"data.gated.config.persona_routes[4].actions[0]: 7 is not a valid action pattern: want a string" in errs
}

test_persona_routes_must_be_a_list if {
	errs := gated.config_errors with data.gated.config.persona_routes as {"db_*": "dba"}
	errs == {`data.gated.config.persona_routes: want a list of {"actions": [patterns], "persona": name}`}
}

test_default_routes_have_no_config_errors if {
	count(gated.config_errors) == 0
}

# --- action patterns ---------------------------------------------------------

# Each of these patterns would be an error verdict at decision time (or
# match nothing): config_errors names it and where it is, so the bundle is
# refused when it loads.
test_bad_action_patterns_config_errors if {
	sops := [
		{"id": "SOP-1", "actions": ["host_restart_service", "rotate_[db_credentials"]},
		{"id": "SOP-2", "actions": [""]},
	]
	config := {
		"skip_review_actions": ["k8s_get_pods", "k8s_{get,list"],
		"persona_routes": [{"actions": ["db_[z-a]*"], "persona": "dba"}],
		"reviewer_overrides": [{"actions": ["host_restart_\\"], "personas": ["oncall"]}],
		"denied_actions": {"acme": ["db_[]", "*_skill"]},
		"change_freezes": [{"name": "year-end", "start": "2026-12-20T00:00:00Z", "end": "2027-01-04T00:00:00Z", "actions": ["host_["]}],
	}
	errs := gated.config_errors with data.gated.sops as sops with data.gated.config as config
	errs == {
		`data.gated.sops[0].actions[1] (SOP-1): "rotate_[db_credentials" is not a valid action pattern: it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)`,
		`data.gated.sops[1].actions[0] (SOP-2): "" is not a valid action pattern: an empty pattern matches no action`,
		`data.gated.config.skip_review_actions[1]: "k8s_{get,list" is not a valid action pattern: it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)`,
		`data.gated.config.persona_routes[0].actions[0]: "db_[z-a]*" is not a valid action pattern: it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)`,
		`data.gated.config.reviewer_overrides[0].actions[0]: "host_restart_\\" is not a valid action pattern: it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)`,
		`data.gated.config.denied_actions.acme[0]: "db_[]" is not a valid action pattern: it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)`,
		`data.gated.config.change_freezes[0].actions[0]: "host_[" is not a valid action pattern: it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)`,
	}
}

test_action_pattern_lists_must_be_lists if {
	skip := gated.config_errors with data.gated.config.skip_review_actions as "k8s_get_pods"
	skip == {`data.gated.config.skip_review_actions: "k8s_get_pods": want a list of action patterns`}
	freeze := gated.config_errors with data.gated.config.change_freezes as [{"name": "f", "start": "2026-12-20T00:00:00Z", "end": "2027-01-04T00:00:00Z", "actions": "host_*"}]
	freeze == {`data.gated.config.change_freezes[0].actions: "host_*": want a list of action patterns`}
	empty := gated.config_errors with data.gated.config.change_freezes as [{"name": "f", "start": "2026-12-20T00:00:00Z", "end": "2027-01-04T00:00:00Z", "actions": null}]
	empty == {`data.gated.config.change_freezes[0].actions: null: want a list of action patterns`}
	every_action := gated.config_errors with data.gated.config.change_freezes as [{"name": "f", "start": "2026-12-20T00:00:00Z", "end": "2027-01-04T00:00:00Z"}]
	count(every_action) == 0
	numbers := gated.config_errors with data.gated.config.skip_review_actions as [7]
	numbers == {"data.gated.config.skip_review_actions[0]: 7 is not a valid action pattern: want a string"}
}

test_valid_action_patterns_have_no_config_errors if {
	config := {
		"skip_review_actions": ["k8s_get_*", "k8s_{get,list}_pods", "k8s_[a-z]?_x", "**"],
		"denied_actions": {"*": ["db_drop_*", "[!a]*"]},
	}
	count(gated.config_errors) == 0 with data.gated.config as config
}

test_sop_star_covers_one_word if {
	p := object.union(write_proposal, {"action": "rotate_db_credentials_then_drop_all_credentials", "class": "destructive", "blast_radius": "cluster"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.sop == null
	d.review.required
}

test_sop_double_star_spans_words if {
	sops := [{"id": "SOP-9", "actions": ["rotate_**_credentials"], "rollback": "r"}]
	p := object.union(write_proposal, {"action": "rotate_prod_db_credentials"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer} with data.gated.sops as sops
	d.sop.id == "SOP-9"
}

test_skip_review_star_is_one_word if {
	skip := ["k8s_get_*"]
	one := object.union(write_proposal, {"action": "k8s_get_pods"})
	d1 := gated.decision with input as {"proposal": one, "persona": reviewer} with data.gated.config.skip_review_actions as skip
	d1.skipped
	not d1.review.required
	more := object.union(write_proposal, {"action": "k8s_get_pods_then_delete_namespace"})
	d2 := gated.decision with input as {"proposal": more, "persona": reviewer} with data.gated.config.skip_review_actions as skip
	not d2.skipped
	d2.review.required
}

test_route_star_is_one_word if {
	routes := [{"actions": ["host_get_*"], "persona": "lenient"}]
	p := object.union(write_proposal, {"action": "host_get_logs_then_wipe_disk"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer} with data.gated.config.persona_routes as routes
	d.review.persona == "reviewer"
}

test_default_route_sends_every_database_action_to_dba if {
	p := object.union(db_proposal, {"action": "db_drop_table"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.review.persona == "dba"
}

test_denylists_keep_wide_patterns if {
	# A deny that matches more is the safe direction: * spans words there.
	p := object.union(write_proposal, {"action": "db_drop_table_now"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer} with data.gated.config.denied_actions as {"*": ["db_drop_*"]}
	"denied_action" in rules(d)
}

test_config_warnings_name_wide_patterns if {
	sops := [{"id": "SOP-9", "actions": ["rotate_**", "host_restart_service"], "rollback": "r"}]
	warnings := gated.config_warnings with data.gated.sops as sops with data.gated.config.skip_review_actions as ["k8s_**", "k8s_get_*"]
	count(warnings) == 2
	some w1 in warnings
	startswith(w1, `data.gated.sops[0] (SOP-9): action pattern "rotate_**" has **`)
	some w2 in warnings
	startswith(w2, `data.gated.config.skip_review_actions: "k8s_**" has **`)
}

test_default_data_has_no_config_warnings if {
	count(gated.config_warnings) == 0
}
