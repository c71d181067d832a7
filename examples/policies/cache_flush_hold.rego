# Example custom rule: a person decides cache flushes.
#
# A flush empties every edge cache at once; it is rarely wrong and always
# expensive, so tenants listed in config.cache_flush_hold_tenants want an
# operator to say yes first, within ten minutes:
#
#   cache_flush_hold_tenants: [initech]
#
# A `hold` entry routes the action to an operator instead of a reviewer
# (docs/POLICIES.md, Operator holds). The hard rules still run first: a
# flush they deny is rejected, never held. The default bundle's
# operator_holds setting holds a list of actions without code; this file
# shows the hand-written equivalent, with a deadline of its own.
package gated

hold contains {
	"rule": "hold_cache_flush",
	"why": sprintf("%s empties every edge cache of tenant %s", [input.proposal.action, input.proposal.tenant]),
	"deadline": "10m",
} if {
	input.proposal.tenant in data.gated.config.cache_flush_hold_tenants
	glob.match("*_flush_cache", null, input.proposal.action)
}
