package gated_test

import data.gated

# --- fixtures ----------------------------------------------------------------

run_reviewer := {
	"name": "run-reviewer",
	"permission_mode": "read-only",
	"tools": ["get_proposal"],
	"disallowed_tools": [],
	"plugin": "llm",
}

tests_passed := {
	"id": "tests", "description": "the test suite passes", "required": true, "kind": "command_result",
	"params": {"exit_code": 0}, "evidence": {"command": "go test ./...", "exit_code": 0, "output": "ok"},
}

tests_failed := object.union(tests_passed, {"evidence": {"command": "go test ./...", "exit_code": 1, "output": "FAIL"}})

changelog := {
	"id": "changelog", "description": "CHANGELOG mentions the fix", "required": true, "kind": "file_contains",
	"params": {"path": "CHANGELOG.md", "text": "nginx"},
	"evidence": {"path": "CHANGELOG.md", "content": "- nginx restarts cleanly"},
}

design := {"id": "design", "description": "the change is minimal", "required": true, "kind": "ai_review", "params": {}, "evidence": {}}

signoff := {"id": "signoff", "description": "release manager signs off", "required": true, "kind": "manual", "params": {}, "evidence": {}}

run_proposal := object.union(write_proposal, {
	"id": "run-review-2",
	"kind": "run",
	"requested_by": {"agent": "orchestrator-1", "session": ""},
	"criteria": [tests_passed, changelog, design, signoff],
	"run": {
		"run_id": "r-77", "task_id": "t-1", "status": "completed", "summary": "bumped nginx",
		"diff": "", "test_output": "ok", "round": 1, "worker": "w-3", "prior_reviews": [],
	},
})

with_run(p, fields) := object.union(p, {"run": object.union(p.run, fields)})

# replace sets key of obj to value; object.union would merge two objects.
replace(obj, key, value) := object.union(object.remove(obj, [key]), {key: value})

with_criteria(p, criteria) := object.union(p, {"criteria": criteria})

run_input(p) := {"proposal": p, "persona": run_reviewer, "history": [], "run_record": null}

run_decide(p) := d if {
	d := gated.decision with input as run_input(p)
}

# judged(d, id) is the policy's judgement of criterion id.
judged(d, id) := c if {
	some c in d.run.criteria
	c.id == id
}

# one_criterion judges a single criterion c in a reviewed run.
one_criterion(c) := judged(run_decide(with_criteria(run_proposal, [c])), c.id)

# --- decision.run ------------------------------------------------------------

test_run_decision_of_a_passing_run if {
	d := run_decide(run_proposal)
	count(d.deny) == 0
	d.run.reviewed == true
	d.run.why == "run review policy always reviews completed runs"
	d.run.review_policy == "always"
	d.run.max_rounds == 5
	d.run.limits == {"max_items": 20, "max_item_bytes": 2048, "max_guidance_bytes": 8192}
	[c.id | some c in d.run.criteria] == ["tests", "changelog"]
	d.run.missing_work == []
	d.run.manual == ["signoff"]
	d.run.continuable == true
}

test_run_decision_is_null_for_actions if {
	d := gated.decision with input as {"proposal": write_proposal, "persona": reviewer, "run_record": null}
	d.run == null
}

test_run_decision_is_null_without_a_kind if {
	p := object.remove(write_proposal, ["kind"])
	d := gated.decision with input as {"proposal": p, "persona": reviewer}
	d.run == null
	d.review.required
}

test_run_limits_are_configurable if {
	d := run_decide(run_proposal) with data.gated.config.run_review as {"limits": {"max_items": 5}}
	d.run.limits == {"max_items": 5, "max_item_bytes": 2048, "max_guidance_bytes": 8192}
}

# --- review policy -----------------------------------------------------------

test_run_review_policy_always_reviews_every_status if {
	every status in ["completed", "failed", "canceled"] {
		d := run_decide(with_run(run_proposal, {"status": status}))
		d.review.required
		d.run.reviewed
		d.run.why == sprintf("run review policy always reviews %s runs", [status])
	}
}

test_run_review_policy_on_success if {
	config := {"policy": "on_success"}
	completed := run_decide(run_proposal) with data.gated.config.run_review as config
	completed.review.required
	completed.run.review_policy == "on_success"

	every status in ["failed", "canceled"] {
		d := run_decide(with_run(run_proposal, {"status": status})) with data.gated.config.run_review as config
		not d.review.required
		not d.run.reviewed
	}
}

test_run_not_reviewed_is_approved_by_the_policy_with_a_reason if {
	p := with_run(with_criteria(run_proposal, [tests_failed, signoff]), {"status": "completed"})
	d := run_decide(p) with data.gated.config.run_review as {"policy": "on_failure"}
	d.review == {"required": false, "persona": "", "quorum": 0, "why": "run review policy on_failure does not review completed runs", "rule": "route_run_unreviewed"}
	d.run.reviewed == false
	d.run.why == d.review.why

	# Criteria are not judged then: the failing test is no deny.
	count(d.deny) == 0
	d.run.criteria == []
	d.run.missing_work == []
	d.run.manual == []
}

test_run_review_policy_on_failure if {
	config := {"policy": "on_failure"}
	failed := run_decide(with_run(run_proposal, {"status": "failed"})) with data.gated.config.run_review as config
	failed.review.required

	every status in ["completed", "canceled"] {
		d := run_decide(with_run(run_proposal, {"status": status})) with data.gated.config.run_review as config
		not d.review.required
		d.review.why == sprintf("run review policy on_failure does not review %s runs", [status])
	}
}

test_run_review_policy_none if {
	every status in ["completed", "failed", "canceled"] {
		d := run_decide(with_run(run_proposal, {"status": status})) with data.gated.config.run_review as {"policy": "none"}
		not d.review.required
		d.run.review_policy == "none"
	}
}

test_run_review_tenant_override if {
	config := {"policy": "always", "tenants": {"acme": {"policy": "on_success", "max_rounds": 3, "quorum": 2, "personas": ["senior"]}}}
	failed := with_run(run_proposal, {"status": "failed"})
	acme := run_decide(failed) with data.gated.config.run_review as config
	not acme.review.required
	acme.run.review_policy == "on_success"
	acme.run.max_rounds == 3

	completed := run_decide(run_proposal) with data.gated.config.run_review as config
	completed.review.persona == "senior"
	completed.review.quorum == 2

	# Another tenant keeps the run_review settings.
	globex := run_decide(object.union(failed, {"tenant": "globex"})) with data.gated.config.run_review as config
	globex.review.required
	globex.review.persona == "run-reviewer"
	globex.review.quorum == 1
	globex.run.review_policy == "always"
	globex.run.max_rounds == 5
}

# --- routing -----------------------------------------------------------------

test_run_routes_to_the_run_reviewer if {
	d := run_decide(run_proposal)
	d.review == {
		"required": true, "persona": "run-reviewer", "quorum": 1,
		"why": "run review policy always reviews completed runs", "personas": [], "rule": "route_run",
	}
}

test_run_routing_order if {
	config := {"personas": ["senior", "junior"], "quorum": 2}
	d := run_decide(object.union(run_proposal, {"reviewer": "picked"})) with data.gated.config.run_review as config
	d.review.persona == "senior"
	d.review.also == ["picked"]
	d.review.personas == ["junior"]
	d.review.quorum == 2

	# Without the proposal's choice; the default persona reviews actions,
	# not runs, unless the run personas name it.
	plain := run_decide(run_proposal) with data.gated.config.run_review as config
		with data.gated.config.default_persona as "general"
	plain.review.persona == "senior"
	plain.review.personas == ["junior"]
}

test_run_routing_skips_the_worker if {
	p := with_run(run_proposal, {"worker": "w-3"})
	d := run_decide(p) with data.gated.config.run_review as {"personas": ["w-3", "run-reviewer"]}
	d.review.persona == "run-reviewer"
	d.review.personas == []
	not d.review.blocked
}

test_run_worker_named_as_reviewer_is_added_and_blocked_in_its_name if {
	# The worker asks to review its own run: the configured reviewer still
	# routes, and the worker, added, cannot review.
	p := with_run(object.union(run_proposal, {"reviewer": "w-3"}), {"worker": "w-3"})
	d := run_decide(p) with data.gated.config.run_review as {"personas": ["w-3", "run-reviewer"]}
	d.review.persona == "run-reviewer"
	d.review.also == ["w-3"]
	not d.review.blocked

	worker := object.union(run_reviewer, {"name": "w-3"})
	as_worker := gated.decision with input as {"proposal": p, "persona": worker, "run_record": null}
		with data.gated.config.run_review as {"personas": ["w-3", "run-reviewer"]}
	as_worker.review.blocked == `persona "w-3" is the run's worker "w-3"; a worker never reviews its own run`
}

# --- the proposal's reviewer -------------------------------------------------

lenient := object.union(run_reviewer, {"name": "lenient"})

test_run_proposal_reviewer_adds_scrutiny if {
	# The run names a reviewer of its own: the configured run reviewer still
	# reviews, and the named one must approve as well.
	p := object.union(run_proposal, {"reviewer": "lenient"})
	d := run_decide(p)
	d.review == {
		"required": true, "persona": "run-reviewer", "quorum": 2, "also": ["lenient"],
		"why": "run review policy always reviews completed runs", "personas": [], "rule": "route_run",
	}
	count(d.deny) == 0

	# Per tenant: the tenant's run personas review, the named one beside.
	tenants := {"tenants": {"acme": {"personas": ["strict"]}}}
	acme := run_decide(p) with data.gated.config.run_review as tenants
	acme.review.persona == "strict"
	acme.review.also == ["lenient"]

	# A quorum the configuration asks for already counts the named reviewer.
	three := run_decide(p) with data.gated.config.run_review as {"personas": ["a", "b", "c"], "quorum": 3}
	three.review.persona == "a"
	three.review.also == ["lenient"]
	three.review.quorum == 3

	# Naming the configured reviewer adds no one.
	same := run_decide(object.union(run_proposal, {"reviewer": "run-reviewer"}))
	not same.review.also
	same.review.quorum == 1
}

test_run_added_reviewer_may_review_in_its_name if {
	p := object.union(run_proposal, {"reviewer": "lenient"})
	d := gated.decision with input as {"proposal": p, "persona": lenient, "run_record": null}
	count(d.deny) == 0
	not d.review.blocked

	# Not named, it is out of scope.
	other := gated.decision with input as {"proposal": run_proposal, "persona": lenient, "run_record": null}
	"persona_out_of_scope" in rules(other)
}

test_run_reviewer_override_allowed_by_configuration if {
	p := object.union(run_proposal, {"reviewer": "lenient"})
	d := run_decide(p) with data.gated.config.run_review as {"reviewer_overrides": ["lenient"]}
	d.review.persona == "lenient"
	d.review.personas == ["run-reviewer"]
	d.review.quorum == 1
	not d.review.also

	# Per tenant: a tenant's list replaces run_review's.
	config := {"reviewer_overrides": ["lenient"], "tenants": {"acme": {"reviewer_overrides": []}}}
	acme := run_decide(p) with data.gated.config.run_review as config
	acme.review.persona == "run-reviewer"
	acme.review.also == ["lenient"]
	globex := run_decide(object.union(p, {"tenant": "globex"})) with data.gated.config.run_review as config
	globex.review.persona == "lenient"

	# Another persona than the ones listed is still only added.
	other := run_decide(object.union(run_proposal, {"reviewer": "other"})) with data.gated.config.run_review as {"reviewer_overrides": ["lenient"]}
	other.review.persona == "run-reviewer"
	other.review.also == ["other"]

	# The action overrides do not apply to runs.
	action := run_decide(p) with data.gated.config.reviewer_overrides as [{"actions": ["**"], "personas": ["lenient"]}]
	action.review.persona == "run-reviewer"
	action.review.also == ["lenient"]
}

test_run_reviewer_alone_is_not_a_run_reviewer if {
	p := object.union(run_proposal, {"reviewer": "lenient"})
	d := run_decide(p) with data.gated.config.run_review as {"personas": []}
	d.review.persona == ""
	d.review.blocked == "no run reviewer is configured: run_review.personas is empty"
}

test_run_reviewer_overrides_config_errors if {
	errs := gated.config_errors with data.gated.config.run_review as {
		"reviewer_overrides": "lenient",
		"tenants": {"acme": {"reviewer_overrides": ["lenient", ""]}, "globex": {"reviewer_overrides": [7]}},
	}
	`data.gated.config.run_review.reviewer_overrides: "lenient": want a list of persona names` in errs
	`data.gated.config.run_review.tenants.acme.reviewer_overrides: ["lenient",""]: want a list of persona names` in errs
	`data.gated.config.run_review.tenants.globex.reviewer_overrides: [7]: want a list of persona names` in errs
	count(gated.config_errors) == 0 with data.gated.config.run_review as {"reviewer_overrides": ["lenient"], "tenants": {"acme": {"reviewer_overrides": []}}}
}

test_run_routing_skips_the_proposing_agent if {
	p := object.union(run_proposal, {"requested_by": {"agent": "run-reviewer", "session": ""}})
	second := object.union(run_reviewer, {"name": "second"})
	d := gated.decision with input as {"proposal": p, "persona": second, "run_record": null}
		with data.gated.config.run_review as {"personas": ["run-reviewer", "second"]}
	d.review.persona == "second"
	d.review.personas == []
	not d.review.blocked
	count(d.deny) == 0
}

test_run_routing_without_requested_by if {
	p := object.union(run_proposal, {"requested_by": null})
	d := run_decide(p)
	d.review.persona == "run-reviewer"
	not d.review.blocked
}

test_run_blocked_when_only_the_worker_could_review if {
	p := with_run(run_proposal, {"worker": "w"})
	d := gated.decision with input as {"proposal": p, "persona": null, "run_record": null}
		with data.gated.config.run_review as {"personas": ["w"]}
		with data.gated.config.default_persona as "w"
	d.review == {
		"required": true, "persona": "", "quorum": 1, "why": "run review policy always reviews completed runs",
		"blocked": `no reviewer other than the run's worker "w" can be routed; a worker never reviews its own run`,
		"rule": "route_run_unroutable",
	}
	count(d.deny) == 0
}

test_run_blocked_names_the_proposing_agent_too if {
	p := object.union(with_run(run_proposal, {"worker": "w"}), {"requested_by": {"agent": "boss", "session": ""}})
	d := run_decide(p) with data.gated.config.run_review as {"personas": ["boss", "w"]}
	d.review.blocked == `no reviewer other than the run's worker "w" and the proposing agent "boss" can be routed; a worker never reviews its own run`
}

test_run_blocked_without_any_run_reviewer if {
	d := run_decide(run_proposal) with data.gated.config.run_review as {"personas": []}
		with data.gated.config.default_persona as ""
	d.review.persona == ""
	d.review.blocked == "no run reviewer is configured: run_review.personas is empty"
}

test_run_blocked_when_the_persona_is_the_worker if {
	# A quorum candidate, or the persona the engine evaluates first.
	p := with_run(run_proposal, {"worker": "reviewer"})
	d := gated.decision with input as {"proposal": p, "persona": reviewer, "run_record": null}
	d.review.persona == "run-reviewer"
	d.review.blocked == `persona "reviewer" is the run's worker "reviewer"; a worker never reviews its own run`
	not "self_review" in rules(d)
	count(d.deny) == 0
}

test_run_blocked_when_the_persona_plugin_is_the_worker if {
	p := with_run(run_proposal, {"worker": "llm"})
	d := run_decide(p)
	d.review.persona == "run-reviewer"
	d.review.blocked == `persona "run-reviewer" runs on plugin "llm", which is the run's worker "llm"; a worker never reviews its own run`
}

test_run_blocked_when_the_persona_is_the_proposing_agent if {
	p := object.union(run_proposal, {"requested_by": {"agent": "run-reviewer", "session": ""}})
	d := run_decide(p) with data.gated.config.run_review as {"personas": ["run-reviewer", "second"]}
	d.review.persona == "second"
	d.review.blocked == `persona "run-reviewer" is the proposing agent "run-reviewer"; a worker never reviews its own run`
	not "self_review" in rules(d)
}

test_run_blocked_when_the_only_candidate_is_the_proposing_agent if {
	p := object.union(run_proposal, {"requested_by": {"agent": "run-reviewer", "session": ""}})
	d := run_decide(p)
	d.review.persona == ""
	d.review.blocked == `no reviewer other than the proposing agent "run-reviewer" can be routed; a worker never reviews its own run`
}

test_run_out_of_scope_for_other_personas if {
	d := gated.decision with input as {"proposal": run_proposal, "persona": reviewer, "run_record": null}
	"persona_out_of_scope" in rules(d)
	not d.run.continuable
}

test_run_persona_out_of_scope_for_actions if {
	p := {
		"v": 1, "id": "a1", "tenant": "acme", "kind": "action", "action": "host_restart_service",
		"class": "write", "blast_radius": "single_device", "target": {}, "flags": {},
	}
	d := gated.decision with input as {"proposal": p, "persona": run_reviewer}
	"persona_out_of_scope" in rules(d)

	# Added by the agent, it is still out of scope.
	added := gated.decision with input as {"proposal": object.union(p, {"reviewer": "run-reviewer"}), "persona": run_reviewer}
	"persona_out_of_scope" in rules(added)

	# Routed to it on purpose, it may review (and must pass its gates).
	chosen := gated.decision with input as {"proposal": object.union(p, {"reviewer": "run-reviewer"}), "persona": run_reviewer}
		with data.gated.config.reviewer_overrides as [{"actions": ["host_restart_service"], "personas": ["run-reviewer"]}]
	not "persona_out_of_scope" in rules(chosen)
}

test_run_not_blocked_for_another_persona if {
	d := run_decide(run_proposal)
	not d.review.blocked
}

test_self_review_still_denies_actions if {
	p := object.union(write_proposal, {"requested_by": {"agent": "llm", "session": "s"}})
	d := gated.decision with input as {"proposal": p, "persona": run_reviewer}
	"self_review" in rules(d)
	not d.review.blocked
}

test_run_ignores_class_routing if {
	# A read of a read tool would pass through; a run is still reviewed.
	read := object.union(run_proposal, {"class": "read", "action": "host_list_services"})
	d := run_decide(read)
	d.review.required
	d.review.persona == "run-reviewer"

	# tenant_wide does not raise the quorum of a run.
	wide := run_decide(object.union(run_proposal, {"blast_radius": "tenant_wide"}))
	wide.review.quorum == 1

	# skip_review_actions does not waive a run's review.
	skipped := run_decide(run_proposal) with data.gated.config.skip_review_actions as ["host_*"]
	skipped.review.required
	skipped.skipped == false

	# persona_routes do not route runs.
	db := run_decide(object.union(run_proposal, {"action": "db_migrate_schema"}))
	db.review.persona == "run-reviewer"
}

test_routed_persona_does_not_review_runs_unless_named if {
	d := gated.decision with input as {"proposal": run_proposal, "persona": dba, "run_record": null}
	"persona_out_of_scope" in rules(d)

	named := gated.decision with input as {"proposal": run_proposal, "persona": dba, "run_record": null}
		with data.gated.config.run_review as {"personas": ["dba"]}
	not "persona_out_of_scope" in rules(named)
	named.review.persona == "dba"
}

# --- command_result ----------------------------------------------------------

test_command_result_passes if {
	c := one_criterion(tests_passed)
	c == {
		"id": "tests", "pass": true, "reason": `"go test ./..." exited 0`,
		"kind": "command_result", "required": true, "judged_by": "policy",
	}
}

test_command_result_fails_on_another_exit_code if {
	c := one_criterion(tests_failed)
	c.pass == false
	c.reason == `"go test ./..." exited 1, expected 0`
}

test_command_result_expected_exit_code if {
	lint := {"id": "lint", "required": true, "kind": "command_result", "params": {"exit_code": 2}, "evidence": {"exit_code": 2}}
	one_criterion(lint).pass
	one_criterion(lint).reason == "the command exited 2"

	wrong := object.union(lint, {"evidence": {"exit_code": 0}})
	one_criterion(wrong).reason == "the command exited 0, expected 2"
}

test_command_result_without_evidence_fails if {
	every evidence in [{}, {"command": "make"}, {"exit_code": null}] {
		c := one_criterion(replace(tests_passed, "evidence", evidence))
		c.pass == false
		c.reason == "no evidence: exit_code missing"
	}
	no_object := one_criterion(replace(tests_passed, "evidence", "exit 0"))
	no_object.reason == "no evidence: exit_code missing"
}

test_command_result_malformed_fails if {
	text := one_criterion(object.union(tests_passed, {"evidence": {"exit_code": "0"}}))
	text.pass == false
	text.reason == `no evidence: exit_code "0" is not a number`

	params := one_criterion(object.union(tests_passed, {"params": {"exit_code": "zero"}}))
	params.pass == false
	params.reason == `params.exit_code "zero" is not a number`
}

# --- file_contains -----------------------------------------------------------

file_criterion(params, evidence) := replace(replace(changelog, "params", params), "evidence", evidence)

changelog_evidence := {"path": "CHANGELOG.md", "content": "## 1.2\n- nginx restarts cleanly\n"}

test_file_contains_text if {
	c := one_criterion(changelog)
	c.pass
	c.reason == `CHANGELOG.md contains "nginx"`
	c.judged_by == "policy"

	missing := one_criterion(file_criterion({"path": "CHANGELOG.md", "text": "apache"}, changelog_evidence))
	missing.pass == false
	missing.reason == `CHANGELOG.md does not contain "apache"`
}

test_file_contains_pattern if {
	c := one_criterion(file_criterion({"path": "CHANGELOG.md", "pattern": `(?m)^## \d+\.\d+$`}, changelog_evidence))
	c.pass
	c.reason == `CHANGELOG.md matches "(?m)^## \\d+\\.\\d+$"`

	miss := one_criterion(file_criterion({"path": "CHANGELOG.md", "pattern": `^# Changelog`}, changelog_evidence))
	miss.pass == false
	miss.reason == `CHANGELOG.md does not match "^# Changelog"`
}

test_file_contains_text_and_pattern_must_both_hold if {
	both := one_criterion(file_criterion({"path": "CHANGELOG.md", "text": "nginx", "pattern": "restarts"}, changelog_evidence))
	both.pass
	both.reason == `CHANGELOG.md contains "nginx" and CHANGELOG.md matches "restarts"`

	one := one_criterion(file_criterion({"path": "CHANGELOG.md", "text": "nginx", "pattern": "apache"}, changelog_evidence))
	one.pass == false
	one.reason == `CHANGELOG.md does not match "apache"`
}

test_file_contains_bad_pattern_fails_without_an_error if {
	c := one_criterion(file_criterion({"path": "CHANGELOG.md", "pattern": "(unclosed"}, changelog_evidence))
	c.pass == false
	c.reason == `params.pattern "(unclosed" is not a valid RE2 regular expression`

	# Perl look-ahead is not RE2.
	perl := one_criterion(file_criterion({"path": "CHANGELOG.md", "pattern": "nginx(?=x)"}, changelog_evidence))
	perl.pass == false
	contains(perl.reason, "not a valid RE2")
}

test_file_contains_malformed_params_fail if {
	no_path := one_criterion(file_criterion({"text": "nginx"}, changelog_evidence))
	no_path.reason == "params.path is missing: name the file the criterion checks"

	nothing := one_criterion(file_criterion({"path": "CHANGELOG.md"}, changelog_evidence))
	nothing.reason == "params.text or params.pattern is required: what the file must contain"

	number := one_criterion(file_criterion({"path": "CHANGELOG.md", "text": 7}, changelog_evidence))
	number.reason == "params.text 7 is not a string"

	every c in [no_path, nothing, number] {
		c.pass == false
	}
}

test_file_contains_missing_evidence_fails if {
	none := one_criterion(file_criterion(changelog.params, {}))
	none.pass == false
	none.reason == "no evidence: content of CHANGELOG.md missing"

	other := one_criterion(file_criterion(changelog.params, {"path": "README.md", "content": "nginx"}))
	other.pass == false
	other.reason == `no evidence: the evidence is for "README.md", not CHANGELOG.md`

	unnamed := one_criterion(file_criterion(changelog.params, {"content": "nginx"}))
	unnamed.pass == false
}

test_long_texts_are_clipped_in_reasons if {
	long := concat("", ["x" | some _ in numbers.range(1, 100)])
	c := one_criterion(file_criterion({"path": "CHANGELOG.md", "text": long}, changelog_evidence))
	c.pass == false
	count(c.reason) < 120
	endswith(c.reason, `..."`)
}

# --- criterion_failed, missing work, manual, continuable ---------------------

test_criterion_failed_for_a_required_criterion if {
	d := run_decide(with_criteria(run_proposal, [tests_failed, changelog, signoff]))
	d.deny == {{"rule": "criterion_failed", "message": `criterion tests (command_result): "go test ./..." exited 1, expected 0`}}
	d.run.missing_work == [`criterion tests (command_result): "go test ./..." exited 1, expected 0`]
	d.run.continuable == true
	judged(d, "changelog").pass
}

test_optional_criterion_failing_is_no_deny if {
	optional := object.union(tests_failed, {"required": false})
	d := run_decide(with_criteria(run_proposal, [optional]))
	count(d.deny) == 0
	d.run.missing_work == []
	judged(d, "tests").pass == false
	judged(d, "tests").required == false
}

test_ai_review_and_manual_criteria_are_not_judged_by_the_policy if {
	d := run_decide(with_criteria(run_proposal, [design, signoff, object.union(signoff, {"id": "optional-signoff", "required": false})]))
	d.run.criteria == []
	d.run.manual == ["signoff"]
	count(d.deny) == 0
}

test_run_not_continuable_for_other_denies if {
	p := with_flags(with_criteria(run_proposal, [tests_failed]), {"skip_review": true})
	d := run_decide(p)
	"criterion_failed" in rules(d)
	"no_skip_review" in rules(d)
	d.run.continuable == false
}

# --- run_closed --------------------------------------------------------------

record(rounds, closed) := {"tenant": "acme", "run_id": "r-77", "task_id": "t-1", "rounds": rounds, "closed": closed}

round_of(n, next, outcome) := {"round": n, "proposal_id": sprintf("run-review-%d", [n]), "outcome": outcome, "next": next, "findings": []}

run_with_record(p, rec) := d if {
	d := gated.decision with input as {"proposal": p, "persona": run_reviewer, "run_record": rec}
}

test_run_closed_when_accepted if {
	d := run_with_record(with_run(run_proposal, {"round": 2}), record([round_of(1, "", "approved")], "accepted"))
	"run_closed" in rules(d)
	some deny in d.deny
	deny.rule == "run_closed"
	deny.message == "run r-77 was accepted in round 1 (proposal run-review-1); a closed run takes no more rounds"
	d.run.continuable == false
}

test_run_closed_when_escalated if {
	rounds := [round_of(1, "continuation", "rejected"), round_of(2, "escalation", "rejected")]
	d := run_with_record(with_run(run_proposal, {"round": 3}), record(rounds, "escalated"))
	"run_closed" in rules(d)
}

test_open_run_is_not_closed if {
	d := run_with_record(with_run(run_proposal, {"round": 2}), record([round_of(1, "continuation", "rejected")], ""))
	count(d.deny) == 0
	no_record := run_with_record(run_proposal, null)
	count(no_record.deny) == 0
}

# --- run_round_out_of_order --------------------------------------------------

test_round_after_a_continuation_is_in_order if {
	rec := record([round_of(1, "continuation", "rejected"), round_of(2, "continuation", "rejected")], "")
	d := run_with_record(with_run(run_proposal, {"round": 3}), rec)
	not "run_round_out_of_order" in rules(d)
}

test_round_out_of_order if {
	rec := record([round_of(1, "continuation", "rejected")], "")
	every round in [1, 3] {
		d := run_with_record(with_run(run_proposal, {"round": round}), rec)
		some deny in d.deny
		deny.rule == "run_round_out_of_order"
		deny.message == sprintf("run r-77 is at round 2, not %d: gated sent round 1 back for a continuation", [round])
		d.run.continuable == false
	}
}

test_round_without_a_continuation_must_be_the_first if {
	# A round is recorded, but none was sent back for a continuation.
	rec := record([round_of(1, "", "approved")], "")
	d := run_with_record(with_run(run_proposal, {"round": 2}), rec)
	some deny in d.deny
	deny.rule == "run_round_out_of_order"
	deny.message == "run r-77 is at round 1, not 2: gated has sent no round of it back for a continuation"
}

test_no_record_no_order_check if {
	d := run_with_record(with_run(run_proposal, {"round": 3}), null)
	not "run_round_out_of_order" in rules(d)
	empty := run_with_record(with_run(run_proposal, {"round": 3}), record([], ""))
	not "run_round_out_of_order" in rules(empty)
}

# --- run_round_limit ---------------------------------------------------------

test_round_limit if {
	last := run_decide(with_run(run_proposal, {"round": 5}))
	not "run_round_limit" in rules(last)

	past := run_decide(with_run(run_proposal, {"round": 6}))
	past.deny == {{"rule": "run_round_limit", "message": "round 6 of run r-77 is past its last round 5 (run_review.max_rounds)"}}
	past.run.continuable == false
}

test_round_limit_is_configurable if {
	d := run_decide(with_run(run_proposal, {"round": 4})) with data.gated.config.run_review as {"max_rounds": 3}
	"run_round_limit" in rules(d)
	d.run.max_rounds == 3
}

# --- run rules leave actions alone -------------------------------------------

test_run_rules_ignore_actions if {
	# An action that carries run-like input is not judged as a run.
	p := object.union(write_proposal, {"criteria": [tests_failed], "run": {"round": 9}})
	d := gated.decision with input as {"proposal": p, "persona": reviewer, "run_record": record([], "accepted")}
	count(d.deny) == 0
	d.run == null
	d.review == {"required": true, "persona": "reviewer", "quorum": 1, "why": "write actions need review", "rule": "route_class"}
}

# --- config_errors -----------------------------------------------------------

test_run_review_full_config_has_no_errors if {
	config := {
		"policy": "on_success", "personas": ["run-reviewer", "senior"], "quorum": 2, "max_rounds": 8,
		"limits": {"max_items": 10, "max_item_bytes": 1024, "max_guidance_bytes": 4096},
		"tenants": {"acme": {"policy": "none"}, "globex": {"personas": [], "quorum": 1, "max_rounds": 1}},
	}
	count(gated.config_errors) == 0 with data.gated.config.run_review as config
}

test_run_review_must_be_an_object if {
	errs := gated.config_errors with data.gated.config.run_review as ["always"]
	errs == {`data.gated.config.run_review: ["always"]: want an object such as {"policy": "always", "personas": ["run-reviewer"]}`}
}

test_run_review_setting_errors if {
	errs := gated.config_errors with data.gated.config.run_review as {
		"policy": "sometimes", "personas": "run-reviewer", "quorum": 0, "max_rounds": 1.5, "polcy": "none",
	}
	errs == {
		`data.gated.config.run_review.policy: "sometimes" is not one of none, on_success, on_failure, always`,
		`data.gated.config.run_review.personas: "run-reviewer": want a list of persona names`,
		"data.gated.config.run_review.quorum: 0 is not an integer from 1 to 16",
		"data.gated.config.run_review.max_rounds: 1.5 is not an integer from 1 to 100",
		"data.gated.config.run_review.polcy: unknown key; run_review has accept_terminal, limits, max_rounds, personas, policy, quorum, reviewer_overrides, tenants",
	}
}

test_run_review_persona_names_must_not_be_empty if {
	errs := gated.config_errors with data.gated.config.run_review as {"personas": ["run-reviewer", ""]}
	errs == {`data.gated.config.run_review.personas: ["run-reviewer",""]: want a list of persona names`}
}

test_run_review_tenant_errors if {
	errs := gated.config_errors with data.gated.config.run_review as {"tenants": {
		"acme": {"policy": "never", "max_rounds": 101, "limits": {}},
		"globex": "on_success",
	}}
	errs == {
		`data.gated.config.run_review.tenants.acme.policy: "never" is not one of none, on_success, on_failure, always`,
		"data.gated.config.run_review.tenants.acme.max_rounds: 101 is not an integer from 1 to 100",
		"data.gated.config.run_review.tenants.acme.limits: unknown key; a tenant may override accept_terminal, max_rounds, personas, policy, quorum, reviewer_overrides",
		`data.gated.config.run_review.tenants.globex: "on_success": want an object with some of policy, personas, quorum, max_rounds`,
	}
	list := gated.config_errors with data.gated.config.run_review as {"tenants": ["acme"]}
	list == {`data.gated.config.run_review.tenants: ["acme"]: want an object of tenant -> {policy, personas, quorum, max_rounds}`}
}

test_run_review_limit_errors if {
	errs := gated.config_errors with data.gated.config.run_review as {"limits": {"max_items": 0, "max_item_bytes": 20000, "max_bytes": 1}}
	errs == {
		"data.gated.config.run_review.limits.max_items: 0 is not an integer from 1 to 256",
		"data.gated.config.run_review.limits.max_item_bytes: 20000 is not an integer from 1 to 16384",
		"data.gated.config.run_review.limits.max_bytes: unknown key; limits has max_guidance_bytes, max_item_bytes, max_items",
	}
	scalar := gated.config_errors with data.gated.config.run_review as {"limits": 20}
	scalar == {"data.gated.config.run_review.limits: 20: want an object with some of max_guidance_bytes, max_item_bytes, max_items"}
}

# --- runs that did not complete ----------------------------------------------

ended(status, task) := with_run(run_proposal, {"status": status, "task_id": task})

test_run_not_completed_denies_unreviewed_failed_and_canceled_runs if {
	every status in ["failed", "canceled"] {
		d := run_decide(ended(status, "T-1")) with data.gated.config.run_review as {"policy": "on_success"}
		not d.review.required
		d.run.accepted_status == ""
		some deny in d.deny
		deny.rule == "run_not_completed"
		contains(deny.message, sprintf("ended %s and run review policy on_success does not review it", [status]))
		not d.run.continuable
	}
}

test_run_not_completed_spares_completed_and_reviewed_runs if {
	completed := run_decide(ended("completed", "T-1")) with data.gated.config.run_review as {"policy": "on_failure"}
	not "run_not_completed" in rules(completed)

	# A reviewed run goes to its reviewer; gated approves it only when
	# decision.run.accepted_status names its status.
	reviewed := run_decide(ended("failed", "T-1"))
	not "run_not_completed" in rules(reviewed)
	reviewed.review.required
	reviewed.run.accepted_status == ""
}

accept := {"policy": "on_success", "accept_terminal": {"nightly-probe": ["failed"]}}

test_run_accept_terminal_accepts_the_listed_status_of_the_listed_task if {
	d := run_decide(ended("failed", "nightly-probe")) with data.gated.config.run_review as accept
	count(d.deny) == 0
	d.run.accepted_status == "failed"
	d.review.why == "run review policy on_success does not review failed runs; accepted terminal status failed for task nightly-probe (run_review.accept_terminal)"

	reviewed := run_decide(ended("failed", "nightly-probe")) with data.gated.config.run_review as object.union(accept, {"policy": "always"})
	reviewed.run.accepted_status == "failed"
	reviewed.review.required
}

test_run_accept_terminal_is_narrow if {
	# Another status, another task, no task: not accepted.
	canceled := run_decide(ended("canceled", "nightly-probe")) with data.gated.config.run_review as accept
	"run_not_completed" in rules(canceled)
	other := run_decide(ended("failed", "nightly")) with data.gated.config.run_review as accept
	"run_not_completed" in rules(other)
	none := run_decide(with_run(run_proposal, {"status": "failed"})) with data.gated.config.run_review as accept
	"run_not_completed" in rules(none)

	# A tenant's accept_terminal replaces the global one for that tenant.
	tenant := run_decide(ended("failed", "nightly-probe")) with data.gated.config.run_review as object.union(accept, {"tenants": {"acme": {"accept_terminal": {}}}})
	"run_not_completed" in rules(tenant)
}

test_run_accept_terminal_config_errors if {
	errs := gated.config_errors with data.gated.config.run_review as {
		"accept_terminal": {"a": ["completed"], "b": [], "c": "failed", "d*": ["failed"], "": ["canceled"]},
		"tenants": {"acme": {"accept_terminal": ["failed"]}},
	}
	errs == {
		`data.gated.config.run_review.accept_terminal.a: ["completed"]: want a non-empty list of failed, canceled`,
		`data.gated.config.run_review.accept_terminal.b: []: want a non-empty list of failed, canceled`,
		`data.gated.config.run_review.accept_terminal.c: "failed": want a non-empty list of failed, canceled`,
		`data.gated.config.run_review.accept_terminal: task id "d*": want a task id, matched exactly (no patterns)`,
		`data.gated.config.run_review.accept_terminal: task id "": want a task id, matched exactly (no patterns)`,
		`data.gated.config.run_review.tenants.acme.accept_terminal: ["failed"]: want an object of task id -> statuses, such as {"nightly-probe": ["failed"]}`,
	}
	count(gated.config_errors) == 0 with data.gated.config.run_review as accept
}
