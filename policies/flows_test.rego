package gated_test

import data.gated

flows_on := {
	"labels": {"read_secret": ["secret"], "fetch_page": ["untrusted"], "send_email": ["egress"], "read_crm": ["private"]},
	"window": "1h",
	"rules": {"egress_after_private": true, "write_after_untrusted": "review"},
}

# t0 is the evaluation time: 2026-01-01T12:00:00Z.
t0 := 1767268800000000000

executed(id, action, labels, ago_ns) := {
	"proposal_id": id, "action": action, "labels": labels,
	"at": time.format(t0 - ago_ns), "at_ns": t0 - ago_ns,
}

session(recent) := {"labels": [], "recent": recent, "since": "", "since_ns": 0, "error": ""}

send_email := object.union(write_proposal, {"action": "send_email", "class": "write", "labels": []})

after_secret := session([executed("p-read", "read_secret", ["secret"], 60000000000)])

flow_input(p, s) := {"proposal": p, "persona": reviewer, "session": s, "now_ns": t0}

test_flow_egress_after_secret_denies_naming_the_read if {
	d := gated.decision with input as flow_input(send_email, after_secret)
		with data.gated.config.flows as flows_on
	some deny in d.deny
	deny.rule == "flow_egress_after_private"
	contains(deny.message, "read_secret (proposal p-read)")
	contains(deny.message, "secret data")
}

test_flow_egress_after_private_denies if {
	s := session([executed("p-crm", "read_crm", ["private"], 1000000000)])
	d := gated.decision with input as flow_input(send_email, s)
		with data.gated.config.flows as flows_on
	"flow_egress_after_private" in rules(d)
}

test_flow_egress_label_added_by_the_proposal if {
	p := object.union(write_proposal, {"labels": ["egress"]})
	d := gated.decision with input as flow_input(p, after_secret)
		with data.gated.config.flows as flows_on
	"flow_egress_after_private" in rules(d)
}

test_flow_egress_after_the_window_allowed if {
	s := session([executed("p-read", "read_secret", ["secret"], 3601000000000)])
	d := gated.decision with input as flow_input(send_email, s)
		with data.gated.config.flows as flows_on
	not "flow_egress_after_private" in rules(d)
}

test_flow_egress_without_earlier_private_allowed if {
	s := session([executed("p-page", "fetch_page", ["untrusted"], 1000000000)])
	d := gated.decision with input as flow_input(object.union(send_email, {"class": "read"}), s)
		with data.gated.config.flows as flows_on
	count(d.deny) == 0
}

test_flow_rules_off_by_default if {
	d := gated.decision with input as flow_input(send_email, after_secret)
		with data.gated.config.flows as object.remove(flows_on, ["rules"])
	not "flow_egress_after_private" in rules(d)
	not "flow_state_unreadable" in rules(d)
}

test_flow_rule_turned_off_explicitly if {
	d := gated.decision with input as flow_input(send_email, after_secret)
		with data.gated.config.flows as object.union(flows_on, {"rules": {"egress_after_private": false}})
	count(d.deny) == 0
}

test_flow_state_unreadable_denies_when_on if {
	s := object.union(session([]), {"error": "the flow record is corrupt"})
	d := gated.decision with input as flow_input(send_email, s)
		with data.gated.config.flows as flows_on
	some deny in d.deny
	deny.rule == "flow_state_unreadable"
	contains(deny.message, "the flow record is corrupt")
}

test_flow_state_unread_denies_when_on if {
	d := gated.decision with input as flow_input(send_email, null)
		with data.gated.config.flows as flows_on
	"flow_state_unreadable" in rules(d)
}

test_flow_state_unreadable_ignored_when_off if {
	s := object.union(session([]), {"error": "the flow record is corrupt"})
	d := gated.decision with input as flow_input(send_email, s)
	count(d.deny) == 0
}

after_page := session([executed("p-page", "fetch_page", ["untrusted"], 120000000000)])

test_flow_write_after_untrusted_goes_to_review_with_the_flow if {
	d := gated.decision with input as flow_input(write_proposal, after_page)
		with data.gated.config.flows as flows_on
		with data.gated.config.skip_review_actions as ["host_restart_service"]
	d.review.required == true
	d.review.rule == "flow_write_after_untrusted"
	contains(d.review.why, "fetch_page (proposal p-page)")
	d.skipped == false
}

test_flow_read_after_untrusted_not_routed if {
	p := object.union(write_proposal, {"class": "read", "action": "host_list_services"})
	d := gated.decision with input as flow_input(p, after_page)
		with data.gated.config.flows as flows_on
	d.review.rule != "flow_write_after_untrusted"
}

test_flow_write_after_untrusted_held_when_asked if {
	d := gated.decision with input as flow_input(write_proposal, after_page)
		with data.gated.config.flows as object.union(flows_on, {"rules": {"write_after_untrusted": "hold"}})
	some h in d.hold
	h.rule == "flow_write_after_untrusted"
	contains(h.why, "fetch_page (proposal p-page)")
	d.review.rule != "flow_write_after_untrusted"
}

test_flow_write_without_untrusted_routed_as_before if {
	d := gated.decision with input as flow_input(write_proposal, after_secret)
		with data.gated.config.flows as flows_on
	d.review.rule == "route_class"
}
