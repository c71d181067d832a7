# Tests for skills.rego, against data.yaml (skill_free_tenants: [acme]).
# Helpers come from weekend_freeze_test.rego, in the same package.
package gated.examples_test

import data.gated

skill_proposal := object.union(wf_proposal, {"tenant": "acme", "action": "web_skill"})

# A Wednesday afternoon, clear of every time window in data.yaml.
midweek := "2026-11-25T14:00:00Z"

test_skills_forbidden_for_a_listed_tenant if {
	"skills_forbidden" in denied_rules(skill_proposal, midweek)
}

test_skills_forbidden_message_names_the_tenant if {
	msg := denial_message(skill_proposal, midweek, "skills_forbidden")
	msg == "tenant acme does not allow skills (it is listed in skill_free_tenants), so web_skill is refused"
}

test_skills_forbidden_catches_namespaced_skills if {
	p := object.union(skill_proposal, {"action": "market.web_skill"})
	"skills_forbidden" in denied_rules(p, midweek)
}

test_skills_forbidden_applies_to_reads if {
	p := object.union(skill_proposal, {"class": "read"})
	"skills_forbidden" in denied_rules(p, midweek)
}

test_skills_allowed_for_other_tenants if {
	p := object.union(skill_proposal, {"tenant": "globex"})
	rs := denied_rules(p, midweek)
	not "skills_forbidden" in rs
}

test_skills_forbidden_leaves_other_actions_alone if {
	p := object.union(skill_proposal, {"action": "host_restart_service"})
	rs := denied_rules(p, midweek)
	not "skills_forbidden" in rs
}

# Only a _skill suffix counts.
test_skills_forbidden_matches_the_suffix_only if {
	p := object.union(skill_proposal, {"action": "skill_inventory"})
	rs := denied_rules(p, midweek)
	not "skills_forbidden" in rs
	p2 := object.union(skill_proposal, {"action": "web_skills"})
	rs2 := denied_rules(p2, midweek)
	not "skills_forbidden" in rs2
}

test_skills_forbidden_needs_configuration if {
	cfg := object.remove(data.gated.config, ["skill_free_tenants"])
	rs := denied_rules(skill_proposal, midweek) with data.gated.config as cfg
	not "skills_forbidden" in rs
}

test_skills_config_errors_not_a_list if {
	errs := gated.config_errors with data.gated.config.skill_free_tenants as "acme"
	errs == {"data.gated.config.skill_free_tenants: want an array of tenant names"}
}
