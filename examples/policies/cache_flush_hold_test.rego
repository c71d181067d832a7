# Tests for cache_flush_hold.rego, against data.yaml
# (cache_flush_hold_tenants: [initech]). Helpers come from
# weekend_freeze_test.rego, in the same package.
package gated.examples_test

import data.gated

flush_proposal := object.union(wf_proposal, {"action": "cdn_flush_cache"})


test_cache_flush_held_for_a_listed_tenant if {
	holds := gated.hold with input as {"proposal": flush_proposal, "persona": null, "history": [], "now_ns": time.parse_rfc3339_ns(midweek)}
	holds == {{"rule": "hold_cache_flush", "why": "cdn_flush_cache empties every edge cache of tenant initech", "deadline": "10m"}}
}

test_cache_flush_not_held_for_another_tenant if {
	p := object.union(flush_proposal, {"tenant": "acme"})
	holds := gated.hold with input as {"proposal": p, "persona": null, "history": [], "now_ns": time.parse_rfc3339_ns(midweek)}
	count(holds) == 0
}

test_cache_flush_denied_is_still_denied if {
	p := object.union(flush_proposal, {"flags": {"skip_review": true}})
	"no_skip_review" in denied_rules(p, midweek)
}
