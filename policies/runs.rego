# Run reviews: the policy's part of judging a finished agent run, a
# proposal of kind run.
#
# The policy decides whether the run is reviewed at all (run_review.policy),
# who may review it (never one of its workers), judges the deterministic
# criteria (command_result, file_contains) from the evidence the fleet
# attached, and refuses rounds that come out of order, past the last round
# or for a run that is already closed. The engine reads decision.run and
# decision.review; a reviewer then judges the ai_review criteria and the
# work, and an operator the manual criteria.
#
# input.run_record is gated's own record of the run's decided rounds
# (engine.RunRecord), or null before the first one.
#
# The run denies live in run_deny, which only a run's decision reads, and
# each starts with input.proposal.kind == "run"; the rules runs share with
# actions (decision, review, self_review) test the kind where it costs
# actions least: first and indexed, or after the conditions actions fail.
package gated

# --- settings ----------------------------------------------------------------

# data.gated.config.run_review, every key optional:
#
#   run_review:
#     policy: always            # none | on_success | on_failure | always
#     personas: [run-reviewer]  # who may review runs, in preference order
#     reviewer_overrides: []    # personas a run's proposal may name to
#                               # review it instead of those (default none)
#     quorum: 1
#     max_rounds: 5
#     limits: {max_items: 20, max_item_bytes: 2048, max_guidance_bytes: 8192}
#     accept_terminal:          # task id -> statuses other than completed
#       nightly-probe: [failed] # that the run of that task may end with
#     tenants:                  # per-tenant policy, personas, quorum,
#       acme: {policy: on_success}  # max_rounds, accept_terminal,
#                               # reviewer_overrides
default run_review_config := {}

run_review_config := data.gated.config.run_review if is_object(data.gated.config.run_review)

default run_tenant_config := {}

run_tenant_config := config if {
	config := data.gated.config.run_review.tenants[input.proposal.tenant]
	is_object(config)
}

# run_setting is the tenant's value of key, else the run_review value, else
# the default.
run_setting(key, fallback) := object.get(run_tenant_config, key, object.get(run_review_config, key, fallback))

run_review_policy := run_setting("policy", "always")

run_personas := run_setting("personas", ["run-reviewer"])

run_reviewer_overrides := run_setting("reviewer_overrides", [])

run_quorum := run_setting("quorum", 1)

run_max_rounds := run_setting("max_rounds", 5)

# Limits are not per tenant: they bound what gated itself stores and sends.
run_limit_defaults := {"max_items": 20, "max_item_bytes": 2048, "max_guidance_bytes": 8192}

run_limits := object.union(run_limit_defaults, object.get(run_review_config, "limits", {}))

# --- whether the run is reviewed ---------------------------------------------

# run_reviewed: always reviews every run (canceled ones too), on_success
# completed runs, on_failure failed runs, none no run.
default run_reviewed := false

run_reviewed if run_review_policy == "always"

run_reviewed if {
	run_review_policy == "on_success"
	input.proposal.run.status == "completed"
}

run_reviewed if {
	run_review_policy == "on_failure"
	input.proposal.run.status == "failed"
}

run_why := concat("", [run_review_why, run_accepted_why])

run_review_why := sprintf("run review policy %s reviews %s runs", [run_review_policy, input.proposal.run.status]) if {
	run_reviewed
} else := sprintf("run review policy %s does not review %s runs", [run_review_policy, input.proposal.run.status])

# --- runs that did not complete ----------------------------------------------

# A run that ended failed or canceled (or with any status but completed)
# is never accepted unless run_review.accept_terminal lists that status for
# the run's task, matched exactly by run.task_id:
#
#   accept_terminal: {nightly-probe: [failed]}
#
# run_accepted_status is the status accepted that way; decision.run
# carries it as accepted_status, and gated approves no run that did not
# complete without it.
run_accept_terminal := run_setting("accept_terminal", {})

run_accepted_status := input.proposal.run.status if {
	input.proposal.run.status != "completed"
	task := input.proposal.run.task_id
	is_string(task)
	task != ""
	statuses := run_accept_terminal[task]
	is_array(statuses)
	input.proposal.run.status in statuses
}

run_accepted_why := sprintf("; accepted terminal status %s for task %s (run_review.accept_terminal)", [run_accepted_status, input.proposal.run.task_id]) if {
	run_accepted_status
} else := ""

run_accepted := run_accepted_status if {
	run_accepted_status
} else := ""

# run_not_completed: a run that is not reviewed and did not complete is
# refused unless its status is accepted. (A reviewed one goes to its
# reviewer, whose guidance may get the next round to complete; gated then
# approves it only when the status is accepted.)
run_deny contains {"rule": "run_not_completed", "message": msg} if {
	input.proposal.kind == "run"
	not run_reviewed
	input.proposal.run.status != "completed"
	not run_accepted_status
	msg := sprintf(
		"run %s ended %s and run review policy %s does not review it; a run that did not complete is accepted only when run_review.accept_terminal lists %s for its task (task_id %q)",
		[input.proposal.run.run_id, input.proposal.run.status, run_review_policy, input.proposal.run.status, object.get(input.proposal.run, "task_id", "")],
	)
}

# --- who reviews -------------------------------------------------------------

# run_workers are the identities a run's reviewer must not have: the worker
# that did the run and the agent that proposes it, in that order.
run_workers := [name |
	some i, name in run_worker_claims
	is_string(name)
	name != ""
	not name in array.slice(run_worker_claims, 0, i)
]

run_worker_claims := [
	object.get(input.proposal, ["run", "worker"], ""),
	object.get(input.proposal, ["requested_by", "agent"], ""),
]

run_identity(name) := sprintf("the run's worker %q", [name]) if {
	name == input.proposal.run.worker
} else := sprintf("the proposing agent %q", [name])

# run_unroutable says why no candidate is left: the workers that were
# candidates, or an empty configuration.
run_unroutable := sprintf("no reviewer other than %s can be routed; a worker never reviews its own run", [concat(" and ", names)]) if {
	names := [run_identity(name) | some name in run_workers; name in run_candidates]
	count(names) > 0
} else := "no run reviewer is configured: run_review.personas is empty"

# run_candidates are the personas that may review the run, in preference
# order: the configured run personas, after the proposal's reviewer when
# run_review.reviewer_overrides lets it replace them. The default persona
# is not one unless it is configured: it reviews actions, and its gates
# are not a run's. run_reviewers are the candidates that are not one of
# the run's workers.
run_candidates := array.concat([proposal_reviewer], run_personas) if {
	run_override_allowed
} else := run_personas

# run_override_allowed: the proposal's reviewer may replace the configured
# run reviewer, because run_review.reviewer_overrides (the tenant's, else
# run_review's) names it. config.reviewer_overrides are for actions and do
# not apply to runs.
run_override_allowed if proposal_reviewer in run_reviewer_overrides

# run_added_reviewers: a proposal's reviewer that does not replace the
# configured run reviewer reviews beside it (review.also), and both must
# approve: the orchestrator of a run may add scrutiny, never choose a more
# lenient reviewer instead of the one the policy names.
run_added_reviewers := [proposal_reviewer] if {
	not run_override_allowed
	count(run_reviewers) > 0
	proposal_reviewer != run_reviewers[0]
} else := []

# run_scope are the personas that may review the run: its candidates and
# the reviewer the proposal adds.
run_scope := array.concat(run_candidates, run_added_reviewers)

run_reviewers := [name |
	some i, name in run_candidates
	name != ""
	not name in run_workers
	not name in array.slice(run_candidates, 0, i)
]

# run_persona_blocked: the persona evaluated (the routed one, or a quorum
# candidate) acts under a worker's name, by its own name or its plugin's.
run_persona_blocked := sprintf("persona %q is %s; a worker never reviews its own run", [input.persona.name, run_identity(input.persona.name)]) if {
	input.persona.name in run_workers
} else := sprintf("persona %q runs on plugin %q, which is %s; a worker never reviews its own run", [input.persona.name, input.persona.plugin, run_identity(input.persona.plugin)]) if {
	input.persona.plugin in run_workers
}

# run_route is decision.review for a run. Class routing does not apply:
# a run is reviewed or not by the review policy alone.
run_route := {
	"required": false,
	"persona": "",
	"quorum": 0,
	"why": run_why,
	"rule": "route_run_unreviewed",
} if {
	not run_reviewed
} else := {
	"required": true,
	"persona": "",
	"quorum": 1,
	"why": run_why,
	"blocked": run_unroutable,
	"rule": "route_run_unroutable",
} if {
	count(run_reviewers) == 0
} else := object.union(run_reviewer_route, {"blocked": run_persona_blocked, "rule": "route_run_blocked"}) if {
	run_persona_blocked
} else := run_reviewer_route

run_reviewer_route := object.union(
	{
		"required": true,
		"persona": run_reviewers[0],
		"quorum": max([run_quorum, 1 + count(run_added_reviewers)]),
		"why": run_why,
		"personas": array.slice(run_reviewers, 1, count(run_reviewers)),
		"rule": "route_run",
	},
	run_review_also,
)

run_review_also := {"also": run_added_reviewers} if {
	count(run_added_reviewers) > 0
} else := {}

# persona_out_of_scope, for runs: only the run's candidates, and the
# reviewer its proposal adds, review it. Other loaded personas do not fill a
# run's quorum. When no candidate is left the
# review is blocked instead, so the rule stays quiet then.
run_deny contains {"rule": "persona_out_of_scope", "message": msg} if {
	input.proposal.kind == "run"
	run_reviewed
	name := input.persona.name
	is_string(name)
	not name in run_scope
	not run_persona_blocked
	count(run_reviewers) > 0
	msg := sprintf("persona %q does not review runs: config.run_review.personas names %s", [name, concat(", ", run_personas)])
}

# persona_out_of_scope, for actions: a run persona does not review actions,
# unless the action is routed to it (by persona_routes, the proposal's
# reviewer or the default persona).
deny contains {"rule": "persona_out_of_scope", "message": msg} if {
	input.proposal.kind != "run"
	review.required
	name := input.persona.name
	name in run_personas
	name != persona_name
	msg := sprintf("persona %q reviews runs (config.run_review.personas), and %s is an action", [name, input.proposal.action])
}

# run_persona_in_scope: a persona that persona_routes sends actions to may
# still review runs when the run review configuration names it, or the
# run's proposal adds it.
run_persona_in_scope(name) if {
	input.proposal.kind == "run"
	name in run_scope
}

# --- deterministic criteria --------------------------------------------------

# run_criteria are the policy's judgements of the command_result and
# file_contains criteria, in proposal order; none when the run is not
# reviewed. Each is {id, pass, reason, kind, required, judged_by}.
run_criteria := [run_judged(c) |
	some c in input.proposal.criteria
	c.kind in {"command_result", "file_contains"}
] if {
	run_reviewed
} else := []

run_judged(c) := object.union(
	{"id": c.id, "kind": c.kind, "required": object.get(c, "required", false) == true, "judged_by": "policy"},
	run_check(c),
)

run_check(c) := run_command_result(run_object(object.get(c, "params", {})), run_object(object.get(c, "evidence", {}))) if {
	c.kind == "command_result"
} else := run_file_contains(run_object(object.get(c, "params", {})), run_object(object.get(c, "evidence", {})))

run_object(x) := x if {
	is_object(x)
} else := {}

# command_result passes when evidence.exit_code is a number equal to
# params.exit_code (default 0).
run_command_result(params, evidence) := run_fail(sprintf("params.exit_code %s is not a number", [json.marshal(params.exit_code)])) if {
	not is_number(object.get(params, "exit_code", 0))
} else := run_fail("no evidence: exit_code missing") if {
	object.get(evidence, "exit_code", null) == null
} else := run_fail(sprintf("no evidence: exit_code %s is not a number", [json.marshal(evidence.exit_code)])) if {
	not is_number(evidence.exit_code)
} else := run_pass(sprintf("%s exited %v", [run_command(evidence), evidence.exit_code])) if {
	evidence.exit_code == object.get(params, "exit_code", 0)
} else := run_fail(sprintf("%s exited %v, expected %v", [run_command(evidence), evidence.exit_code, object.get(params, "exit_code", 0)]))

run_command(evidence) := sprintf("%q", [evidence.command]) if {
	is_string(evidence.command)
	evidence.command != ""
} else := "the command"

# file_contains passes when the evidence is the content of params.path and
# it contains params.text (a substring) and matches params.pattern (an RE2
# regular expression), whichever of the two are given. A malformed
# criterion or missing evidence fails it with the reason; it is never an
# evaluation error.
run_file_contains(params, evidence) := run_fail("params.path is missing: name the file the criterion checks") if {
	not run_name(object.get(params, "path", null))
} else := run_fail("params.text or params.pattern is required: what the file must contain") if {
	object.get(params, "text", null) == null
	object.get(params, "pattern", null) == null
} else := run_fail(sprintf("params.%s %s is not a string", [key, json.marshal(params[key])])) if {
	some key in ["text", "pattern"]
	object.get(params, key, null) != null
	not is_string(params[key])
} else := run_fail(sprintf("params.pattern %q is not a valid RE2 regular expression", [params.pattern])) if {
	is_string(params.pattern)
	not regex.is_valid(params.pattern)
} else := run_file_evidence(params, evidence)

run_file_evidence(params, evidence) := run_fail(sprintf("no evidence: content of %s missing", [params.path])) if {
	not is_string(object.get(evidence, "content", null))
} else := run_fail(sprintf("no evidence: the evidence is for %s, not %s", [json.marshal(object.get(evidence, "path", null)), params.path])) if {
	object.get(evidence, "path", null) != params.path
} else := run_file_match(params, evidence.content)

run_file_match(params, content) := run_pass(concat(" and ", [t.yes | some t in tests])) if {
	tests := run_file_tests(params, content)
	every t in tests {
		t.pass
	}
} else := run_fail(concat(" and ", [t.no | some t in run_file_tests(params, content); not t.pass]))

run_file_tests(params, content) := array.concat(
	[t |
		is_string(params.text)
		t := {
			"pass": contains(content, params.text),
			"yes": sprintf("%s contains %q", [params.path, run_clip(params.text)]),
			"no": sprintf("%s does not contain %q", [params.path, run_clip(params.text)]),
		}
	],
	[t |
		is_string(params.pattern)
		t := {
			"pass": regex.match(params.pattern, content),
			"yes": sprintf("%s matches %q", [params.path, run_clip(params.pattern)]),
			"no": sprintf("%s does not match %q", [params.path, run_clip(params.pattern)]),
		}
	],
)

run_pass(reason) := {"pass": true, "reason": reason}

run_fail(reason) := {"pass": false, "reason": reason}

run_name(x) if {
	is_string(x)
	x != ""
}

run_clip(s) := s if {
	count(s) <= 80
} else := sprintf("%s...", [substring(s, 0, 77)])

# run_missing_work is what the failed required criteria ask of the worker.
run_missing_work := [run_missing(c) | some c in run_criteria; c.required; not c.pass]

run_missing(c) := sprintf("criterion %s (%s): %s", [c.id, c.kind, c.reason])

# run_manual names the required manual criteria: an operator judges them
# before a reviewed run can be approved.
run_manual := [c.id |
	some c in input.proposal.criteria
	c.kind == "manual"
	c.required == true
] if {
	run_reviewed
} else := []

# --- denies ------------------------------------------------------------------

# run_deny holds the rules only a run can break. decision.deny of a run is
# deny | run_deny: kept out of deny, they cost an action's evaluation
# nothing, not even a look at the kind in deny's rule index. Rules of your
# own for runs may go in either.

# criterion_failed: a required deterministic criterion failed. It is the
# only deny about the work itself, so the only one another round may fix.
run_deny contains {"rule": "criterion_failed", "message": run_missing(c)} if {
	input.proposal.kind == "run"
	some c in run_criteria
	c.required
	not c.pass
}

# run_closed: gated accepted the run, or escalated it after its last round.
run_deny contains {"rule": "run_closed", "message": msg} if {
	input.proposal.kind == "run"
	input.run_record.closed in {"accepted", "escalated"}
	msg := sprintf("run %s was %s%s; a closed run takes no more rounds", [input.proposal.run.run_id, input.run_record.closed, run_closing_round])
}

run_closing_round := sprintf(" in round %d (proposal %s)", [last.round, last.proposal_id]) if {
	rounds := [r.round | some r in input.run_record.rounds]
	some last in input.run_record.rounds
	last.round == max(rounds)
} else := ""

# run_round_out_of_order: the next round of a run is the one after the last
# round gated sent back for a continuation, or 1.
run_deny contains {"rule": "run_round_out_of_order", "message": msg} if {
	input.proposal.kind == "run"
	count(input.run_record.rounds) > 0
	input.proposal.run.round != run_expected_round
	msg := sprintf("run %s is at round %d, not %d: %s", [input.proposal.run.run_id, run_expected_round, input.proposal.run.round, run_expected_why])
}

run_continued := {r.round | some r in input.run_record.rounds; r.next == "continuation"}

run_expected_round := max(run_continued) + 1 if {
	count(run_continued) > 0
} else := 1

run_expected_why := sprintf("gated sent round %d back for a continuation", [max(run_continued)]) if {
	count(run_continued) > 0
} else := "gated has sent no round of it back for a continuation"

# run_round_limit: a run gets run_review.max_rounds rounds.
run_deny contains {"rule": "run_round_limit", "message": msg} if {
	input.proposal.kind == "run"
	input.proposal.run.round > run_max_rounds
	msg := sprintf("round %d of run %s is past its last round %d (run_review.max_rounds)", [input.proposal.run.round, input.proposal.run.run_id, run_max_rounds])
}

# --- decision.run ------------------------------------------------------------

# run_decision is decision.run of a run.
run_decision := {
	"reviewed": run_reviewed,
	"why": run_why,
	"review_policy": run_review_policy,
	"max_rounds": run_max_rounds,
	"criteria": run_criteria,
	"missing_work": run_missing_work,
	"manual": run_manual,
	"continuable": run_continuable,
	"limits": run_limits,
	"accepted_status": run_accepted,
} if {
	input.proposal.kind == "run"
}

# run_denies is decision.deny of a run.
run_denies := deny | run_deny

# run_continuable: a rejection may go back to the worker only when it is
# about the work, so when every deny is a failed criterion (or there is no
# deny and a reviewer rejects).
default run_continuable := false

run_continuable if {
	every d in run_denies {
		d.rule == "criterion_failed"
	}
}

# --- data validation ---------------------------------------------------------

run_review_policies := ["none", "on_success", "on_failure", "always"]

run_review_keys := {"policy", "personas", "quorum", "max_rounds", "limits", "tenants", "accept_terminal", "reviewer_overrides"}

run_tenant_keys := {"policy", "personas", "quorum", "max_rounds", "accept_terminal", "reviewer_overrides"}

# run_terminal_statuses are the statuses accept_terminal may accept.
run_terminal_statuses := ["failed", "canceled"]

run_limit_ceilings := {"max_items": 256, "max_item_bytes": 16384, "max_guidance_bytes": 65536}

run_review_max_rounds := 100

config_errors contains sprintf("data.gated.config.run_review: %s: want an object such as {\"policy\": \"always\", \"personas\": [\"run-reviewer\"]}", [json.marshal(config)]) if {
	config := data.gated.config.run_review
	not is_object(config)
}

config_errors contains sprintf("data.gated.config.run_review.%s: unknown key; run_review has %s", [key, concat(", ", sort(run_review_keys))]) if {
	some key, _ in run_review_config
	not key in run_review_keys
}

config_errors contains sprintf("data.gated.config.run_review.tenants: %s: want an object of tenant -> {policy, personas, quorum, max_rounds}", [json.marshal(tenants)]) if {
	tenants := run_review_config.tenants
	not is_object(tenants)
}

config_errors contains sprintf("data.gated.config.run_review.tenants.%s: %s: want an object with some of policy, personas, quorum, max_rounds", [tenant, json.marshal(config)]) if {
	is_object(run_review_config.tenants)
	some tenant, config in run_review_config.tenants
	not is_object(config)
}

config_errors contains sprintf("data.gated.config.run_review.tenants.%s.%s: unknown key; a tenant may override %s", [tenant, key, concat(", ", sort(run_tenant_keys))]) if {
	is_object(run_review_config.tenants)
	some tenant, config in run_review_config.tenants
	is_object(config)
	some key, _ in config
	not key in run_tenant_keys
}

# run_review_scopes are the places the per-tenant settings can be set.
run_review_scopes contains ["data.gated.config.run_review", run_review_config]

run_review_scopes contains [sprintf("data.gated.config.run_review.tenants.%s", [tenant]), config] if {
	is_object(run_review_config.tenants)
	some tenant, config in run_review_config.tenants
	is_object(config)
}

config_errors contains sprintf("%s.policy: %s is not one of %s", [path, json.marshal(value), concat(", ", run_review_policies)]) if {
	some [path, scope] in run_review_scopes
	value := scope.policy
	not value in run_review_policies
}

config_errors contains sprintf("%s.personas: %s: want a list of persona names", [path, json.marshal(value)]) if {
	some [path, scope] in run_review_scopes
	value := scope.personas
	not run_persona_list(value)
}

config_errors contains sprintf("%s.reviewer_overrides: %s: want a list of persona names", [path, json.marshal(value)]) if {
	some [path, scope] in run_review_scopes
	value := scope.reviewer_overrides
	not run_persona_list(value)
}

config_errors contains sprintf("%s.quorum: %s is not an integer from 1 to 16", [path, json.marshal(value)]) if {
	some [path, scope] in run_review_scopes
	value := scope.quorum
	not valid_quorum(value)
}

config_errors contains sprintf("%s.max_rounds: %s is not an integer from 1 to %d", [path, json.marshal(value), run_review_max_rounds]) if {
	some [path, scope] in run_review_scopes
	value := scope.max_rounds
	not run_integer_in(value, run_review_max_rounds)
}

config_errors contains sprintf("data.gated.config.run_review.limits: %s: want an object with some of %s", [json.marshal(limits), concat(", ", sort(object.keys(run_limit_ceilings)))]) if {
	limits := run_review_config.limits
	not is_object(limits)
}

config_errors contains sprintf("data.gated.config.run_review.limits.%s: unknown key; limits has %s", [key, concat(", ", sort(object.keys(run_limit_ceilings)))]) if {
	is_object(run_review_config.limits)
	some key, _ in run_review_config.limits
	not key in object.keys(run_limit_ceilings)
}

config_errors contains sprintf("data.gated.config.run_review.limits.%s: %s is not an integer from 1 to %d", [key, json.marshal(value), ceiling]) if {
	is_object(run_review_config.limits)
	some key, value in run_review_config.limits
	ceiling := run_limit_ceilings[key]
	not run_integer_in(value, ceiling)
}

config_errors contains sprintf("%s.accept_terminal: %s: want an object of task id -> statuses, such as {\"nightly-probe\": [\"failed\"]}", [path, json.marshal(value)]) if {
	some [path, scope] in run_review_scopes
	value := scope.accept_terminal
	not is_object(value)
}

config_errors contains sprintf("%s.accept_terminal.%s: %s: want a non-empty list of %s", [path, task, json.marshal(statuses), concat(", ", run_terminal_statuses)]) if {
	some [path, scope] in run_review_scopes
	is_object(scope.accept_terminal)
	some task, statuses in scope.accept_terminal
	not run_terminal_list(statuses)
}

config_errors contains sprintf("%s.accept_terminal: task id %q: want a task id, matched exactly (no patterns)", [path, task]) if {
	some [path, scope] in run_review_scopes
	is_object(scope.accept_terminal)
	some task, _ in scope.accept_terminal
	not run_exact_task(task)
}

run_terminal_list(statuses) if {
	is_array(statuses)
	count(statuses) > 0
	every status in statuses {
		status in run_terminal_statuses
	}
}

run_exact_task(task) if {
	is_string(task)
	task != ""
	not contains(task, "*")
	not contains(task, "?")
}

run_persona_list(names) if {
	is_array(names)
	every name in names {
		run_name(name)
	}
}

run_integer_in(n, ceiling) if {
	is_number(n)
	n == round(n)
	n >= 1
	n <= ceiling
}
