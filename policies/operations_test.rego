package gated_test

import data.gated

# now is 2026-11-21T12:00:00Z.
now_ns := 1795262400000000000

minute_ns := 60000000000

at(p, history) := {"proposal": p, "persona": reviewer, "history": history, "now_ns": now_ns}

approval(id, agent, age_minutes) := {
	"proposal_id": id,
	"tenant": "acme",
	"action": "host_restart_service",
	"outcome": "approved",
	"stage": "review",
	"agent": agent,
	"decided_at_ns": now_ns - (age_minutes * minute_ns),
}

# --- denied_action -----------------------------------------------------------

test_denied_action_for_the_tenant if {
	p := object.union(write_proposal, {"action": "web_skill"})
	d := gated.decision with input as at(p, []) with data.gated.config.denied_actions as {"acme": ["*_skill"]}
	"denied_action" in rules(d)
}

test_denied_action_catches_namespaced_skills if {
	p := object.union(write_proposal, {"action": "market-web_skill"})
	d := gated.decision with input as at(p, []) with data.gated.config.denied_actions as {"acme": ["*_skill"]}
	"denied_action" in rules(d)
}

test_denied_action_ignores_case if {
	every action in ["web_SKILL", "Web_Skill", "DB_DROP_TABLE"] {
		p := object.union(write_proposal, {"action": action})
		d := gated.decision with input as at(p, []) with data.gated.config.denied_actions as {"acme": ["*_skill", "db_drop_*"]}
		"denied_action" in rules(d)
	}
}

test_denied_action_for_every_tenant if {
	p := object.union(write_proposal, {"tenant": "globex", "action": "db_drop_table"})
	d := gated.decision with input as at(p, []) with data.gated.config.denied_actions as {"*": ["db_drop_*"]}
	"denied_action" in rules(d)
}

test_denied_action_leaves_other_tenants_alone if {
	p := object.union(write_proposal, {"tenant": "globex", "action": "web_skill"})
	d := gated.decision with input as at(p, []) with data.gated.config.denied_actions as {"acme": ["*_skill"]}
	not "denied_action" in rules(d)
}

test_denied_action_leaves_other_actions_alone if {
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.denied_actions as {"acme": ["*_skill"], "*": ["db_*"]}
	not "denied_action" in rules(d)
}

test_denied_action_applies_to_reads if {
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as at(p, []) with data.gated.config.denied_actions as {"acme": ["host_*"]}
	"denied_action" in rules(d)
}

# --- parallel_operation ------------------------------------------------------

test_parallel_operation_of_another_agent if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "other-agent", 8)])
	"parallel_operation" in rules(d)
	not "target_cooldown" in rules(d)
}

test_parallel_operation_window_ends if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "other-agent", 11)])
	count(d.deny) == 0
}

test_parallel_operation_window_is_configurable if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "other-agent", 11)])
		with data.gated.config.parallel_operation_window as "30m"
	"parallel_operation" in rules(d)
}

test_parallel_operation_counts_unnamed_agents_as_others if {
	p := object.union(write_proposal, {"requested_by": null})
	d := gated.decision with input as at(p, [approval("p0", "", 8)])
	"parallel_operation" in rules(d)
}

test_parallel_operation_ignores_rejections if {
	h := object.union(approval("p0", "other-agent", 1), {"outcome": "rejected"})
	d := gated.decision with input as at(write_proposal, [h])
	count(d.deny) == 0
}

test_parallel_operation_ignores_the_proposal_itself if {
	d := gated.decision with input as at(write_proposal, [approval("p1", "other-agent", 1)])
	count(d.deny) == 0
}

test_parallel_operation_ignores_reads if {
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as at(p, [approval("p0", "other-agent", 1)])
	count(d.deny) == 0
}

test_parallel_operation_reads_input_now_when_now_ns_is_missing if {
	doc := {"proposal": write_proposal, "persona": reviewer, "history": [approval("p0", "other-agent", 8)], "now": "2026-11-21T12:00:00Z"}
	d := gated.decision with input as doc
	"parallel_operation" in rules(d)
}

# --- target_cooldown ---------------------------------------------------------

test_target_cooldown_of_the_same_agent if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "ops-agent", 3)])
	"target_cooldown" in rules(d)
	not "parallel_operation" in rules(d)
}

test_target_cooldown_ends if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "ops-agent", 6)])
	count(d.deny) == 0
}

test_target_cooldown_is_configurable if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "ops-agent", 6)])
		with data.gated.config.target_cooldown as "15m"
	"target_cooldown" in rules(d)
}

test_history_message_names_the_earlier_proposal if {
	d := gated.decision with input as at(write_proposal, [approval("p0", "other-agent", 2)])
	some entry in d.deny
	entry.rule == "parallel_operation"
	contains(entry.message, "proposal p0")
	contains(entry.message, "120s ago")
	contains(entry.message, "agent other-agent")
}

# --- change_freeze -----------------------------------------------------------

freeze := {
	"name": "year-end",
	"start": "2026-11-20T00:00:00Z",
	"end": "2026-11-23T00:00:00Z",
	"reason": "year-end change freeze",
}

test_change_freeze_denies_inside_the_window if {
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [freeze]
	some entry in d.deny
	entry.rule == "change_freeze"
	contains(entry.message, "year-end change freeze")
}

test_change_freeze_end_is_exclusive if {
	w := object.union(freeze, {"end": "2026-11-21T12:00:00Z"})
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [w]
	count(d.deny) == 0
}

test_change_freeze_start_is_inclusive if {
	w := object.union(freeze, {"start": "2026-11-21T12:00:00Z"})
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [w]
	"change_freeze" in rules(d)
}

test_change_freeze_outside_the_window if {
	w := object.union(freeze, {"start": "2026-12-20T00:00:00Z", "end": "2027-01-04T00:00:00Z"})
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [w]
	count(d.deny) == 0
}

test_change_freeze_scoped_to_tenants if {
	w := object.union(freeze, {"tenants": ["globex"]})
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [w]
	count(d.deny) == 0
}

test_change_freeze_scoped_to_actions if {
	w := object.union(freeze, {"actions": ["db_*"]})
	d := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [w]
	count(d.deny) == 0
	w2 := object.union(freeze, {"actions": ["host_*"]})
	d2 := gated.decision with input as at(write_proposal, []) with data.gated.config.change_freezes as [w2]
	"change_freeze" in rules(d2)
}

test_change_freeze_lets_reads_through if {
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as at(p, []) with data.gated.config.change_freezes as [freeze]
	count(d.deny) == 0
}

test_change_freeze_incident_exemption if {
	w := object.union(freeze, {"allow_incidents": true})
	p := object.union(write_proposal, {"incident_id": "INC-42"})
	d := gated.decision with input as at(p, []) with data.gated.config.change_freezes as [w]
	count(d.deny) == 0
}

test_change_freeze_incident_needs_the_window_to_allow_it if {
	p := object.union(write_proposal, {"incident_id": "INC-42"})
	d := gated.decision with input as at(p, []) with data.gated.config.change_freezes as [freeze]
	"change_freeze" in rules(d)
}

# --- config_errors -----------------------------------------------------------

test_default_config_has_no_errors if {
	count(gated.config_errors) == 0
}

test_config_errors_bad_freeze_time if {
	w := object.union(freeze, {"start": "next friday"})
	errs := gated.config_errors with data.gated.config.change_freezes as [w]
	errs == {`data.gated.config.change_freezes[0].start: "next friday" is not an RFC 3339 time`}
}

test_config_errors_freeze_ends_before_it_starts if {
	w := object.union(freeze, {"end": "2026-11-19T00:00:00Z"})
	errs := gated.config_errors with data.gated.config.change_freezes as [w]
	count(errs) == 1
}

test_config_errors_freeze_without_name if {
	w := object.remove(freeze, ["name"])
	errs := gated.config_errors with data.gated.config.change_freezes as [w]
	errs == {"data.gated.config.change_freezes[0].name: want a non-empty string"}
}

test_config_errors_bad_duration if {
	errs := gated.config_errors with data.gated.config.target_cooldown as "five minutes"
	count(errs) == 1
}

test_config_errors_bad_quorum if {
	errs := gated.config_errors with data.gated.config.tenant_wide_quorum as 0
	count(errs) == 1
}

test_config_errors_denied_actions_shape if {
	errs := gated.config_errors with data.gated.config.denied_actions as {"acme": "*_skill"}
	count(errs) == 1
}

test_change_freeze_actions_ignore_case if {
	p := object.union(write_proposal, {"action": "HOST_Restart_Service"})
	d := gated.decision with input as at(p, []) with data.gated.config.change_freezes as [object.union(freeze, {"actions": ["host_*"]})]
	"change_freeze" in rules(d)
}

# --- recent_failure ----------------------------------------------------------

# ran is an approval of the same action, by another agent, decided
# age_minutes ago, whose executor reported status after_minutes ago.
ran(id, age_minutes, status, after_minutes) := object.union(approval(id, "other-agent", age_minutes), {"execution": {
	"status": status,
	"at_ns": now_ns - (after_minutes * minute_ns),
	"error": "unit failed to start",
}})

test_recent_failure_denies_after_a_failed_run if {
	d := gated.decision with input as at(write_proposal, [ran("old", 40, "failed", 35)])
	"recent_failure" in rules(d)
}

test_recent_failure_names_the_failed_proposal_and_its_error if {
	d := gated.decision with input as at(write_proposal, [ran("old", 40, "failed", 35)])
	some deny in d.deny
	deny.rule == "recent_failure"
	contains(deny.message, "old")
	contains(deny.message, "unit failed to start")
}

test_recent_failure_denies_destructive_too if {
	p := object.union(write_proposal, {"class": "destructive"})
	d := gated.decision with input as at(p, [ran("old", 40, "failed", 35)])
	"recent_failure" in rules(d)
}

test_recent_failure_window_ends if {
	d := gated.decision with input as at(write_proposal, [ran("old", 70, "failed", 61)])
	not "recent_failure" in rules(d)
}

test_recent_failure_window_is_configurable if {
	d := gated.decision with input as at(write_proposal, [ran("old", 70, "failed", 61)])
		with data.gated.config.recent_failure_window as "2h"
	"recent_failure" in rules(d)
}

test_recent_failure_cleared_by_a_later_success if {
	d := gated.decision with input as at(write_proposal, [ran("old", 50, "failed", 45), ran("newer", 40, "succeeded", 30)])
	not "recent_failure" in rules(d)
}

test_recent_failure_not_cleared_by_a_run_without_a_final_outcome if {
	d := gated.decision with input as at(write_proposal, [ran("old", 50, "failed", 45), ran("newer", 40, "started", 39), approval("unused", "other-agent", 30)])
	"recent_failure" in rules(d)
}

test_recent_failure_ignores_succeeded_runs if {
	d := gated.decision with input as at(write_proposal, [ran("old", 40, "succeeded", 35)])
	not "recent_failure" in rules(d)
}

test_recent_failure_ignores_other_actions if {
	h := object.union(ran("old", 40, "failed", 35), {"action": "k8s_scale_deployment"})
	d := gated.decision with input as at(write_proposal, [h])
	not "recent_failure" in rules(d)
}

test_recent_failure_ignores_reads if {
	p := object.union(write_proposal, {"class": "read"})
	d := gated.decision with input as at(p, [ran("old", 40, "failed", 35)])
	not "recent_failure" in rules(d)
}

test_recent_failure_ignores_the_proposal_itself if {
	d := gated.decision with input as at(write_proposal, [ran("p1", 40, "failed", 35)])
	not "recent_failure" in rules(d)
}

test_config_errors_bad_recent_failure_window if {
	errs := gated.config_errors with data.gated.config.recent_failure_window as "an hour"
	some e in errs
	contains(e, "recent_failure_window")
}
