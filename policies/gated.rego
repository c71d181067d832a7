# The default gated policy bundle: routing and settings.
#
# gated evaluates data.gated.decision once per proposal. Authors extend the
# bundle with their own `deny contains {"rule": ..., "message": ...} if {...}`
# rules in extra files of package gated; any deny entry rejects the proposal
# at stage policy, and no reviewer or flag can override it.
#
# input:  {"proposal": {...}, "persona": {...} | null, "history": [...],
#          "now": "RFC 3339", "now_ns": nanoseconds since the epoch}
# data:   data.gated.config (settings), data.gated.sops (SOP catalog),
#         data.gated.tools (tool catalog: name -> {"class": "read" | "write" | ...})
#
# The rules read input.proposal.* directly rather than through helper
# variables: OPA indexes rules on input refs and skips the bodies of rules
# whose first conditions cannot match. Every setting has a default, so a
# bundle with no data still decides.
package gated

# decision is the single entry point.
decision := {
	"deny": deny,
	"review": review,
	"reviewer_tools": tool_bag.reviewer_tools,
	"denied_tools": tool_bag.denied_tools,
	"sop": covering_sop,
	"skipped": review_skipped,
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

# --- routing -----------------------------------------------------------------

# persona_name is who reviews: the proposal's own choice, else the configured
# default, else the built-in reviewer.
persona_name := input.proposal.reviewer if {
	is_string(input.proposal.reviewer)
	input.proposal.reviewer != ""
} else := default_persona

# review_skipped is true when configuration waives review for a mutating
# action. It is the only way to skip review; every skip is audited by gated.
default review_skipped := false

review_skipped if {
	input.proposal.class != "read"
	some pattern in data.gated.config.skip_review_actions
	glob.match(pattern, null, input.proposal.action)
}

# read_pass_through: a read action skips review only when the tool catalog
# also lists the action as read. The class is the agent's own claim; an
# action the catalog does not know is reviewed, and one the catalog lists as
# mutating is denied (rule class_mismatch).
read_pass_through if {
	input.proposal.class == "read"
	data.gated.tools[input.proposal.action].class == "read"
}

review := {
	"required": false,
	"persona": "",
	"quorum": 0,
	"why": "read actions change nothing and need no review",
} if {
	read_pass_through
} else := {
	"required": false,
	"persona": "",
	"quorum": 0,
	"why": sprintf("review of %s is waived by configuration (skip_review_actions)", [input.proposal.action]),
} if {
	review_skipped
} else := {
	"required": true,
	"persona": persona_name,
	"quorum": quorum,
	"why": review_why,
}

review_why := "write actions need review" if {
	input.proposal.class == "write"
} else := "destructive actions need review" if {
	input.proposal.class == "destructive"
} else := sprintf("%s is declared read but is not a read action in the tool catalog", [input.proposal.action]) if {
	input.proposal.class == "read"
} else := sprintf("class %v needs review", [input.proposal.class])

# quorum: tenant-wide changes need more than one reviewer.
quorum := tenant_wide_quorum if {
	input.proposal.blast_radius == "tenant_wide"
} else := 1

# --- SOP catalog -------------------------------------------------------------

# covering_sops lists, in catalog order, the SOPs with an action pattern
# that matches the proposal's action.
covering_sops := [sop |
	some sop in data.gated.sops
	some pattern in sop.actions
	glob.match(pattern, null, input.proposal.action)
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
