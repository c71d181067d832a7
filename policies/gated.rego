# The default gated policy bundle: routing and settings.
#
# gated evaluates data.gated.decision once per proposal. Authors extend the
# bundle with their own `deny contains {"rule": ..., "message": ...} if {...}`
# rules in extra files of package gated; any deny entry rejects the proposal
# at stage policy, and no reviewer or flag can override it.
#
# input:  {"proposal": {...}, "persona": {...} | null, "history": [...],
#          "run_record": {...} | null, "now": "RFC 3339",
#          "now_ns": nanoseconds since the epoch}
# data:   data.gated.config (settings), data.gated.sops (SOP catalog),
#         data.gated.tools (tool catalog: name -> {"class": "read" | "write" | ...})
#
# The rules read input.proposal.* directly rather than through helper
# variables: OPA indexes rules on input refs and skips the bodies of rules
# whose first conditions cannot match. Every setting has a default, so a
# bundle with no data still decides.
package gated

# decision is the single entry point. A run's decision adds the run rules'
# denies (run_deny) and the run section (run_decision, runs.rego); an
# action's run section is null. The two bodies are spelled out because the
# first condition is indexed: an action never evaluates anything of runs.
# A run is never held for an operator (decision.hold, holds.rego): its
# manual criteria are (run_review.manual).
decision := {
	"deny": run_denies,
	"review": review,
	"reviewer_tools": tool_bag.reviewer_tools,
	"denied_tools": tool_bag.denied_tools,
	"sop": covering_sop,
	"skipped": review_skipped,
	"run": run_decision,
	"hold": [],
} if {
	input.proposal.kind == "run"
} else := {
	"deny": deny,
	"review": review,
	"reviewer_tools": tool_bag.reviewer_tools,
	"denied_tools": tool_bag.denied_tools,
	"sop": covering_sop,
	"skipped": review_skipped,
	"run": null,
	"hold": hold,
}

# tool_bag is computed only for a proposal that goes to review: nobody
# else gets tools, and the filtering is the costliest part of a decision.
tool_bag := {"reviewer_tools": reviewer_tools, "denied_tools": denied_tools} if {
	review.required
	count(deny) == 0
} else := {"reviewer_tools": [], "denied_tools": set()}

# --- settings ----------------------------------------------------------------

default default_persona := "reviewer"

default_persona := data.gated.config.default_persona

default tenant_wide_quorum := 2

tenant_wide_quorum := data.gated.config.tenant_wide_quorum

default production_tags := ["production"]

production_tags := data.gated.config.production_tags

# now_ns is the evaluation time: the engine supplies input.now_ns; a caller
# with only input.now (or neither) still gets a time.
now_ns := input.now_ns if {
	is_number(input.now_ns)
} else := time.parse_rfc3339_ns(input.now) if {
	is_string(input.now)
} else := time.now_ns()

# mutating is true for proposals that change something.
mutating if input.proposal.class == "write"

mutating if input.proposal.class == "destructive"

# --- action patterns ---------------------------------------------------------

# action_pattern_matches is how every setting that lets an action through,
# or eases its review, matches the action: SOP coverage (sops[].actions),
# skip_review_actions, persona_routes and reviewer_overrides. The action's
# words are separated by "_" or "-"; a * matches within one word (so
# rotate_*_credentials covers rotate_db_credentials but not
# rotate_db_credentials_then_drop_all_credentials, nor
# rotate_db-then-drop-all_credentials), ? one character of a
# word, and ** any number of words. The Go side (engine.MatchAction) reads
# patterns the same way; policies/testdata/action_patterns.json holds the
# cases both are tested on.
#
# Denylists (denied_actions, change_freezes[].actions, the tool denylists)
# keep glob.match with null delimiters: there a * that matches more is the
# safe direction.
action_pattern_matches(pattern, action) if glob.match(pattern, ["_", "-"], action)

# config_warnings lists what `gated policy check` reports about the data
# without refusing the bundle: here, patterns that let an action through
# and use **, which spans any number of words, so an SOP, a skip or an
# override covers every action that begins and ends like the pattern.
# Authors may add their own entries.
config_warnings contains sprintf("data.gated.sops[%d] (%s): action pattern %q has **, which spans any number of words of an action: the SOP covers every action that begins and ends like it; prefer exact names or one * per word", [i, object.get(sop, "id", ""), pattern]) if {
	some i, sop in data.gated.sops
	some pattern in sop.actions
	wide_action_pattern(pattern)
}

config_warnings contains sprintf("data.gated.config.skip_review_actions: %q has **, which spans any number of words of an action: review is waived for every action that begins and ends like it", [pattern]) if {
	some pattern in data.gated.config.skip_review_actions
	wide_action_pattern(pattern)
}

config_warnings contains sprintf("data.gated.config.reviewer_overrides[%d]: %q has **, which spans any number of words of an action: the proposal's reviewer replaces the routed persona for every action that begins and ends like it", [i, pattern]) if {
	some i, override in data.gated.config.reviewer_overrides
	some pattern in override.actions
	wide_action_pattern(pattern)
}

wide_action_pattern(pattern) if {
	is_string(pattern)
	contains(pattern, "**")
}

# config_errors refuses a bundle with an action pattern that would fail
# when a proposal meets it: one that does not compile is an evaluation
# error, so an error verdict, for every proposal it is matched against,
# and one that is empty or not a string matches nothing. The message names
# the pattern and where it is. Denylist patterns are checked too: a bad one
# would fail every proposal of the tenant.
config_errors contains sprintf("%s: %s is not a valid action pattern: %s", [place, json.marshal(pattern), action_pattern_problem(pattern)]) if {
	some [place, pattern] in configured_action_patterns
	not valid_action_pattern(pattern)
}

# configured_action_patterns are the action patterns of the policy data,
# each as [where it is, pattern].
configured_action_patterns contains [sprintf("data.gated.sops[%v].actions[%v] (%v)", [i, j, object.get(sop, "id", "")]), pattern] if {
	some i, sop in data.gated.sops
	some j, pattern in sop.actions
}

configured_action_patterns contains [sprintf("data.gated.config.skip_review_actions[%v]", [j]), pattern] if {
	is_array(data.gated.config.skip_review_actions)
	some j, pattern in data.gated.config.skip_review_actions
}

configured_action_patterns contains [sprintf("data.gated.config.persona_routes[%v].actions[%v]", [i, j]), pattern] if {
	is_array(data.gated.config.persona_routes)
	some i, route in data.gated.config.persona_routes
	is_array(route.actions)
	some j, pattern in route.actions
}

configured_action_patterns contains [sprintf("data.gated.config.reviewer_overrides[%v].actions[%v]", [i, j]), pattern] if {
	is_array(data.gated.config.reviewer_overrides)
	some i, override in data.gated.config.reviewer_overrides
	is_array(override.actions)
	some j, pattern in override.actions
}

configured_action_patterns contains [sprintf("data.gated.config.denied_actions.%v[%v]", [scope, j]), pattern] if {
	some scope, patterns in data.gated.config.denied_actions
	is_array(patterns)
	some j, pattern in patterns
}

configured_action_patterns contains [sprintf("data.gated.config.change_freezes[%v].actions[%v]", [i, j]), pattern] if {
	some i, window in data.gated.config.change_freezes
	is_array(window.actions)
	some j, pattern in window.actions
}

config_errors contains sprintf("data.gated.config.skip_review_actions: %s: want a list of action patterns", [json.marshal(patterns)]) if {
	patterns := data.gated.config.skip_review_actions
	not is_array(patterns)
}

# A freeze's actions that are not a list (null included, as YAML reads an
# empty "actions:") would cover no action at all.
config_errors contains sprintf("data.gated.config.change_freezes[%v].actions: %s: want a list of action patterns", [i, json.marshal(actions)]) if {
	some i, window in data.gated.config.change_freezes
	actions := window.actions
	not is_array(actions)
}

# valid_action_pattern: a non-empty string that compiles. config_errors is
# evaluated with builtin errors non-fatal, so glob.match on a pattern that
# does not compile is undefined rather than false. The delimiters do not
# change what compiles.
valid_action_pattern(pattern) if {
	is_string(pattern)
	pattern != ""
	is_boolean(glob.match(pattern, ["_", "-"], ""))
}

action_pattern_problem(pattern) := "want a string" if {
	not is_string(pattern)
} else := "an empty pattern matches no action" if {
	pattern == ""
} else := "it does not compile (an unclosed [ or {, an empty or reversed range, a trailing backslash)"

# --- routing -----------------------------------------------------------------

# persona_routes send actions to specialised personas: a list of
# {"actions": [action patterns], "persona": name}, tried in order. By
# default every database action goes to the built-in dba persona; []
# turns routing off.
default persona_routes := [{"actions": ["db_**"], "persona": "dba"}]

persona_routes := data.gated.config.persona_routes

# routed_personas lists, in route order, the personas whose routes match
# the action. Routes match in any case: a route sends an action to the
# reviewer made for it, and DB_drop_table must not slip past the dba
# route by its spelling.
routed_personas := [route.persona |
	some route in persona_routes
	some pattern in route.actions
	is_string(pattern)
	action_pattern_matches(lower(pattern), lower(input.proposal.action))
]

# proposal_reviewer is the persona the proposal asks for, if any.
proposal_reviewer := input.proposal.reviewer if {
	is_string(input.proposal.reviewer)
	input.proposal.reviewer != ""
}

# reviewer_overrides let a proposal's reviewer replace the routed persona
# for some actions: a list of {"actions": [action patterns], "personas":
# [names]}. By default there are none: the agent under review never picks
# who reviews it instead of the policy.
default reviewer_overrides := []

reviewer_overrides := data.gated.config.reviewer_overrides

# reviewer_override_allowed: the proposal's reviewer may replace the routed
# persona for this action.
reviewer_override_allowed if {
	some override in reviewer_overrides
	proposal_reviewer in override.personas
	some pattern in override.actions
	action_pattern_matches(pattern, input.proposal.action)
}

# persona_name is who reviews: the proposal's reviewer when
# reviewer_overrides allow it for the action, else the first persona a route
# sends the action to, else the configured default, else the built-in
# reviewer.
persona_name := proposal_reviewer if {
	reviewer_override_allowed
} else := routed_personas[0] if {
	count(routed_personas) > 0
} else := default_persona

# added_reviewers: a proposal's reviewer that does not replace the routed
# persona reviews beside it. Both must approve: an agent may add scrutiny,
# not swap it for its own choice.
added_reviewers := [proposal_reviewer] if {
	proposal_reviewer != persona_name
} else := []

# persona_out_of_scope: a persona that routes send actions to reviews those
# actions only. A specialised reviewer is not a general one: it does not
# fill a quorum for other changes, nor review one an agent sends its way.
# It reviews runs only when config.run_review names it (or the run does).
deny contains {"rule": "persona_out_of_scope", "message": msg} if {
	review.required
	name := input.persona.name
	some route in persona_routes
	route.persona == name
	not name in routed_personas
	not run_persona_in_scope(name)
	msg := sprintf("persona %q reviews only the actions config.persona_routes sends it, and %s is not one of them", [name, input.proposal.action])
}

config_errors contains "data.gated.config.persona_routes: want a list of {\"actions\": [patterns], \"persona\": name}" if {
	routes := data.gated.config.persona_routes
	not is_array(routes)
}

config_errors contains sprintf("data.gated.config.persona_routes[%d]: %s: want {\"actions\": [patterns], \"persona\": name}", [i, json.marshal(route)]) if {
	some i, route in data.gated.config.persona_routes
	is_array(data.gated.config.persona_routes)
	not valid_route(route)
}

config_errors contains "data.gated.config.reviewer_overrides: want a list of {\"actions\": [patterns], \"personas\": [names]}" if {
	overrides := data.gated.config.reviewer_overrides
	not is_array(overrides)
}

config_errors contains sprintf("data.gated.config.reviewer_overrides[%d]: %s: want {\"actions\": [patterns], \"personas\": [names]}, both non-empty lists of non-empty strings and nothing else", [i, json.marshal(override)]) if {
	is_array(data.gated.config.reviewer_overrides)
	some i, override in data.gated.config.reviewer_overrides
	not valid_override(override)
}

valid_override(override) if {
	is_object(override)
	object.keys(override) == {"actions", "personas"}
	non_empty_strings(override.actions)
	non_empty_strings(override.personas)
}

non_empty_strings(list) if {
	is_array(list)
	count(list) > 0
	every s in list {
		is_string(s)
		s != ""
	}
}

valid_route(route) if {
	is_string(route.persona)
	route.persona != ""
	is_array(route.actions)
	count(route.actions) > 0
	every pattern in route.actions {
		is_string(pattern)
	}
}

# review_skipped is true when configuration waives review for a mutating
# action. It is the only way to skip review; every skip is audited by gated.
default review_skipped := false

review_skipped if {
	input.proposal.class != "read"
	some pattern in data.gated.config.skip_review_actions
	action_pattern_matches(pattern, input.proposal.action)
	input.proposal.kind != "run"
	not flow_review
}

# read_pass_through: a read action skips review only when the tool catalog
# also lists the action as read. The class is the agent's own claim; an
# action the catalog does not know is reviewed, and one the catalog lists as
# mutating is denied (rule class_mismatch).
read_pass_through if {
	input.proposal.class == "read"
	data.gated.tools[input.proposal.action].class == "read"
}

# review routes an action by its class. A run is routed by the run review
# settings alone (run_route, runs.rego); the first condition is indexed, so
# actions skip that branch without evaluating it.
# Each branch names itself in "rule", which the verdict's policy section
# carries as the routing rule that decided.
review := run_route if {
	input.proposal.kind == "run"
} else := object.union(
	{"required": true, "persona": persona_name, "quorum": quorum, "why": data.gated.flows.review_why, "rule": "flow_write_after_untrusted"},
	review_also,
) if {
	flow_review
} else := {
	"required": false,
	"persona": "",
	"quorum": 0,
	"why": "read actions change nothing and need no review",
	"rule": "route_read",
} if {
	read_pass_through
} else := {
	"required": false,
	"persona": "",
	"quorum": 0,
	"why": sprintf("review of %s is waived by configuration (skip_review_actions)", [input.proposal.action]),
	"rule": "route_skip",
} if {
	review_skipped
} else := object.union(
	{"required": true, "persona": persona_name, "quorum": quorum, "why": review_why, "rule": "route_class"},
	review_also,
)

# review_also names the reviewers that must review besides the persona
# (review.also); none is left out.
review_also := {"also": added_reviewers} if {
	count(added_reviewers) > 0
} else := {}

review_why := "write actions need review" if {
	input.proposal.class == "write"
} else := "destructive actions need review" if {
	input.proposal.class == "destructive"
} else := sprintf("%s is declared read but is not a read action in the tool catalog", [input.proposal.action]) if {
	input.proposal.class == "read"
} else := sprintf("class %v needs review", [input.proposal.class])

# quorum: tenant-wide changes need more than one reviewer, and a reviewer
# the proposal adds is one more when the class asks for fewer.
quorum := max([class_quorum, 1 + count(added_reviewers)])

class_quorum := tenant_wide_quorum if {
	input.proposal.blast_radius == "tenant_wide"
} else := 1

# --- SOP catalog -------------------------------------------------------------

# covering_sops lists, in catalog order, the SOPs with an action pattern
# that matches the proposal's action (action_pattern_matches: a * stands
# for one word of the action, never for several).
covering_sops := [sop |
	some sop in data.gated.sops
	some pattern in sop.actions
	action_pattern_matches(pattern, input.proposal.action)
]

# sop_covers is true when an SOP in the catalog covers the action.
sop_covers if count(covering_sops) > 0

# covering_sop is the first covering SOP, or null.
covering_sop := covering_sops[0] if sop_covers else := null

# --- targets -----------------------------------------------------------------

# production_target is true when the target carries a production tag or a
# production environment.
production_target if {
	some tag in input.proposal.target.tags
	tag in production_tags
}

production_target if input.proposal.target.environment in production_tags

# --- flows -------------------------------------------------------------------

# The flow rules (flows.rego, package gated.flows) deny like any rule.
# flows.on reads data alone, so it is decided once per data document: with
# no flow rule on, they cost a decision nothing more.
deny contains refusal if {
	data.gated.flows.on
	some refusal in data.gated.flows.deny
}

# flow_review: a write after untrusted content, when data turns the rule
# on, goes to review with the flow in the reviewer's prompt, even where
# configuration would waive it.
flow_review if {
	data.gated.flows.on
	data.gated.flows.review_why
}
