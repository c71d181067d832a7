# The default gated policy bundle.
#
# gated evaluates data.gated.decision once per proposal. Authors extend the
# bundle with their own `deny contains {"rule": ..., "message": ...} if {...}`
# rules in extra files of package gated; any deny entry rejects the proposal
# at stage policy, and no reviewer or flag can override it.
#
# input:  {"proposal": {...}, "persona": {...} | null, "history": [...], "now": "RFC 3339"}
# data:   data.gated.config (settings), data.gated.sops (SOP catalog),
#         data.gated.tools (tool catalog: name -> {"class": "read" | "write" | ...})
package gated

# decision is the single entry point.
decision := {
	"deny": [d | some d in deny],
	"review": review,
	"reviewer_tools": reviewer_tools,
	"denied_tools": sort(denied_tools),
	"sop": covering_sop,
	"skipped": review_skipped,
}

proposal := input.proposal

flags := object.get(proposal, "flags", {})

# settings, sop_catalog and tool_catalog read the data documents. Each is
# named explicitly: referring to data.gated as a whole from package gated
# would make every rule depend on itself.
settings := data.gated.config if is_object(data.gated.config) else := {}

sop_catalog := data.gated.sops if is_array(data.gated.sops) else := []

tool_catalog := data.gated.tools if is_object(data.gated.tools) else := {}

# --- routing -----------------------------------------------------------------

# persona_name is who reviews: the proposal's own choice, else the configured
# default, else the built-in reviewer.
persona_name := proposal.reviewer if {
	is_string(proposal.reviewer)
	proposal.reviewer != ""
} else := object.get(settings, "default_persona", "reviewer")

# review_skipped is true when configuration waives review for a mutating
# action. It is the only way to skip review; every skip is audited by gated.
default review_skipped := false

review_skipped if {
	proposal.class != "read"
	some pattern in object.get(settings, "skip_review_actions", [])
	glob.match(pattern, null, proposal.action)
}

# read_pass_through: a read action skips review only when the tool catalog
# also lists the action as read. The class is the agent's own claim; an
# action the catalog does not know is reviewed, and one the catalog lists as
# mutating is denied (rule class_mismatch).
read_pass_through if {
	proposal.class == "read"
	object.get(tool_catalog, [proposal.action, "class"], "unknown") == "read"
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
	"why": sprintf("review of %s is waived by configuration (skip_review_actions)", [proposal.action]),
} if {
	review_skipped
} else := {
	"required": true,
	"persona": persona_name,
	"quorum": quorum,
	"why": review_why,
}

review_why := sprintf("%s is declared read but is not a read action in the tool catalog", [proposal.action]) if {
	proposal.class == "read"
} else := sprintf("%s actions need review", [proposal.class])

# quorum: tenant-wide changes need more than one reviewer.
quorum := object.get(settings, "tenant_wide_quorum", 2) if {
	proposal.blast_radius == "tenant_wide"
} else := 1

# --- SOP catalog -------------------------------------------------------------

covering_sops contains sop if {
	some sop in sop_catalog
	some pattern in sop.actions
	glob.match(pattern, null, proposal.action)
}

# sop_covers is true when an SOP in the catalog covers the action.
sop_covers if count(covering_sops) > 0

covering_sop := sort(covering_sops)[0] if sop_covers else := null

# --- targets -----------------------------------------------------------------

production_tags := object.get(settings, "production_tags", ["production"])

# production_target is true when the target carries a production tag or a
# production environment.
production_target if {
	some tag in object.get(proposal, ["target", "tags"], [])
	tag in production_tags
}

production_target if {
	object.get(proposal, ["target", "environment"], "") in production_tags
}
