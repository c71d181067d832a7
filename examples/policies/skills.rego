# Example custom rule: tenants that may not run skills.
#
# A skill is a packaged capability an agent can invoke (web_skill,
# market.web_skill, ...). What it does is up to the skill, so its class says
# little; some tenants would rather not have agents run any. They are listed
# in config.skill_free_tenants:
#
#   skill_free_tenants: [acme]
#
# The default bundle's denied_action rule can do the same without code:
#
#   denied_actions: {"acme": ["*_skill"]}
#
# This file shows the hand-written equivalent, which is where to start when
# the condition outgrows a list of patterns.
package gated

# skills_forbidden applies to every class, reads included: a skill declared
# read is still code the tenant has not agreed to run.
#
# glob.match gets null delimiters, so "*" matches any character, dots
# included: "*_skill" catches the namespaced "market.web_skill" too. With
# the default delimiter ["."] it would match "web_skill" only.
deny contains {"rule": "skills_forbidden", "message": msg} if {
	input.proposal.tenant in data.gated.config.skill_free_tenants
	glob.match("*_skill", null, input.proposal.action)
	msg := sprintf(
		"tenant %s does not allow skills (it is listed in skill_free_tenants), so %s is refused",
		[input.proposal.tenant, input.proposal.action],
	)
}

config_errors contains "data.gated.config.skill_free_tenants: want an array of tenant names" if {
	tenants := data.gated.config.skill_free_tenants
	not all_strings(tenants)
}

all_strings(list) if {
	is_array(list)
	every item in list {
		is_string(item)
	}
}
