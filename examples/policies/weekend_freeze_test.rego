# Tests for weekend_freeze.rego, and for the year-end change freeze that
# data.yaml configures for the default change_freeze rule.
#
# The package is not gated_test: the default bundle's tests live there and
# define helpers (write_proposal, rules, at, ...) that these files would
# otherwise collide with. Tests run against data.yaml unless a test says
# otherwise with `with`.
package gated.examples_test

import data.gated

# A write by tenant initech, which data.yaml's weekend freeze covers.
wf_proposal := {
	"v": 1,
	"id": "wf-1",
	"tenant": "initech",
	"kind": "action",
	"action": "host_restart_service",
	"class": "write",
	"target": {"device_id": 7, "service": "nginx", "tags": ["production"]},
	"reason": "nginx is wedged",
	"blast_radius": "single_device",
	"requested_by": {"agent": "ops-agent", "session": "s1"},
}

# denied_rules is the set of rules that deny proposal p at time `when`
# (RFC 3339). It is always defined, so `not "x" in denied_rules(...)`
# cannot pass because of a typo in a time.
denied_rules(p, when) := {entry.rule | some entry in entries} if {
	entries := gated.deny with input as {"proposal": p, "persona": null, "history": [], "now_ns": time.parse_rfc3339_ns(when)}
}

# denial_message is the message of the first entry of rule `rule`.
denial_message(p, when, rule) := msg if {
	entries := gated.deny with input as {"proposal": p, "persona": null, "history": [], "now_ns": time.parse_rfc3339_ns(when)}
	msgs := [entry.message | some entry in entries; entry.rule == rule]
	msg := msgs[0]
}

# 2026-11-27 is a Friday; Berlin is at UTC+1 in November and UTC+2 in July.

# --- the window's edges, on the Berlin clock ---------------------------------

test_weekend_freeze_quiet_before_friday_16 if {
	rs := denied_rules(wf_proposal, "2026-11-27T15:59:59+01:00")
	not "weekend_freeze" in rs
}

test_weekend_freeze_starts_friday_16 if {
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-27T16:00:00+01:00")
}

test_weekend_freeze_holds_over_the_weekend if {
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-28T12:00:00+01:00") # Saturday
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-29T23:59:00+01:00") # Sunday
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-30T00:00:00+01:00") # Monday, midnight
}

test_weekend_freeze_holds_until_monday_06 if {
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-30T05:59:59+01:00")
}

test_weekend_freeze_ends_monday_06 if {
	rs := denied_rules(wf_proposal, "2026-11-30T06:00:00+01:00")
	not "weekend_freeze" in rs
}

test_weekend_freeze_quiet_midweek if {
	rs := denied_rules(wf_proposal, "2026-11-25T16:30:00+01:00") # Wednesday
	not "weekend_freeze" in rs
}

# --- time zones --------------------------------------------------------------

# Friday 15:30 UTC is already 16:30 in Berlin.
test_weekend_freeze_reads_the_berlin_clock if {
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-27T15:30:00Z")
}

# The same instant is before 16:00 on a UTC clock.
test_weekend_freeze_timezone_is_configurable if {
	rs := denied_rules(wf_proposal, "2026-11-27T15:30:00Z") with data.gated.config.weekend_freeze.timezone as "UTC"
	not "weekend_freeze" in rs
}

# Monday 05:30 UTC is 06:30 in Berlin: the window has ended there.
test_weekend_freeze_ends_on_the_berlin_clock if {
	rs := denied_rules(wf_proposal, "2026-11-30T05:30:00Z")
	not "weekend_freeze" in rs
}

# In summer Berlin is UTC+2: 14:30 UTC on Friday 3 July is 16:30 there.
test_weekend_freeze_follows_summer_time if {
	"weekend_freeze" in denied_rules(wf_proposal, "2026-07-03T14:30:00Z")
	rs := denied_rules(wf_proposal, "2026-07-03T13:30:00Z")
	not "weekend_freeze" in rs
}

# --- what it applies to ------------------------------------------------------

test_weekend_freeze_denies_destructive if {
	p := object.union(wf_proposal, {"class": "destructive", "action": "kill_process"})
	"weekend_freeze" in denied_rules(p, "2026-11-28T12:00:00+01:00")
}

test_weekend_freeze_lets_reads_through if {
	p := object.union(wf_proposal, {"class": "read", "action": "host_list_services"})
	rs := denied_rules(p, "2026-11-28T12:00:00+01:00")
	not "weekend_freeze" in rs
}

test_weekend_freeze_leaves_unlisted_tenants_alone if {
	p := object.union(wf_proposal, {"tenant": "acme"})
	rs := denied_rules(p, "2026-11-28T12:00:00+01:00")
	not "weekend_freeze" in rs
}

test_weekend_freeze_without_tenants_covers_everyone if {
	cfg := object.remove(data.gated.config.weekend_freeze, ["tenants"])
	p := object.union(wf_proposal, {"tenant": "acme"})
	"weekend_freeze" in denied_rules(p, "2026-11-28T12:00:00+01:00") with data.gated.config.weekend_freeze as cfg
}

test_weekend_freeze_needs_configuration if {
	cfg := object.remove(data.gated.config, ["weekend_freeze"])
	rs := denied_rules(wf_proposal, "2026-11-28T12:00:00+01:00") with data.gated.config as cfg
	not "weekend_freeze" in rs
}

# --- incidents ---------------------------------------------------------------

test_weekend_freeze_lets_incident_fixes_through if {
	p := object.union(wf_proposal, {"incident_id": "INC-7"})
	rs := denied_rules(p, "2026-11-28T12:00:00+01:00")
	not "weekend_freeze" in rs
}

test_weekend_freeze_empty_incident_id_does_not_count if {
	p := object.union(wf_proposal, {"incident_id": ""})
	"weekend_freeze" in denied_rules(p, "2026-11-28T12:00:00+01:00")
}

test_weekend_freeze_incidents_need_allow_incidents if {
	p := object.union(wf_proposal, {"incident_id": "INC-7"})
	"weekend_freeze" in denied_rules(p, "2026-11-28T12:00:00+01:00") with data.gated.config.weekend_freeze.allow_incidents as false
}

# --- the message -------------------------------------------------------------

test_weekend_freeze_message_names_window_and_end if {
	msg := denial_message(wf_proposal, "2026-11-27T16:30:00+01:00", "weekend_freeze")
	msg == "weekend freeze (Friday 16:00 to Monday 06:00, Europe/Berlin) is in force until Monday 2026-11-30 06:00; proposals with an incident_id are exempt"
}

# The end date is counted on the Berlin calendar: late on Sunday the end is
# the next day, early on Monday the same day.
test_weekend_freeze_end_date_from_late_sunday if {
	msg := denial_message(wf_proposal, "2026-11-29T23:30:00+01:00", "weekend_freeze")
	contains(msg, "until Monday 2026-11-30 06:00")
}

test_weekend_freeze_end_date_on_monday_morning if {
	msg := denial_message(wf_proposal, "2026-11-30T05:00:00+01:00", "weekend_freeze")
	contains(msg, "until Monday 2026-11-30 06:00")
}

# The last Sunday of October 2026 switches Berlin back to winter time.
test_weekend_freeze_end_date_across_summer_time_switch if {
	msg := denial_message(wf_proposal, "2026-10-24T00:30:00+02:00", "weekend_freeze") # Saturday
	contains(msg, "until Monday 2026-10-26 06:00")
}

# --- other windows -----------------------------------------------------------

# A window that does not wrap past Sunday: Tuesday 22:00 to Wednesday 02:00.
test_weekend_freeze_window_inside_the_week if {
	cfg := {"timezone": "UTC", "from_day": "Tuesday", "from_time": "22:00", "to_day": "Wednesday", "to_time": "02:00"}
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-24T23:00:00Z") with data.gated.config.weekend_freeze as cfg
	rs := denied_rules(wf_proposal, "2026-11-25T02:00:00Z") with data.gated.config.weekend_freeze as cfg
	not "weekend_freeze" in rs
	rs2 := denied_rules(wf_proposal, "2026-11-28T12:00:00Z") with data.gated.config.weekend_freeze as cfg
	not "weekend_freeze" in rs2
}

# Every setting but the zone has a default: Friday 16:00 to Monday 06:00.
test_weekend_freeze_defaults if {
	cfg := {"timezone": "Europe/Berlin"}
	"weekend_freeze" in denied_rules(wf_proposal, "2026-11-27T16:00:00+01:00") with data.gated.config.weekend_freeze as cfg
	p := object.union(wf_proposal, {"incident_id": "INC-7"})
	"weekend_freeze" in denied_rules(p, "2026-11-27T16:00:00+01:00") with data.gated.config.weekend_freeze as cfg
}

# --- config_errors -----------------------------------------------------------

test_example_config_has_no_errors if {
	count(gated.config_errors) == 0
}

test_weekend_freeze_config_errors_unknown_timezone if {
	errs := gated.config_errors with data.gated.config.weekend_freeze.timezone as "Europe/Berlln"
	errs == {`data.gated.config.weekend_freeze.timezone: "Europe/Berlln" is not an IANA time zone such as "Europe/Berlin"`}
}

test_weekend_freeze_config_errors_bad_day if {
	errs := gated.config_errors with data.gated.config.weekend_freeze.from_day as "Fri"
	errs == {`data.gated.config.weekend_freeze.from_day: "Fri" is not a day such as "Friday"`}
}

test_weekend_freeze_config_errors_bad_time if {
	errs := gated.config_errors with data.gated.config.weekend_freeze.to_time as "6am"
	errs == {`data.gated.config.weekend_freeze.to_time: "6am" is not a 24-hour time such as "16:00"`}
}

test_weekend_freeze_config_errors_empty_window if {
	cfg := object.union(data.gated.config.weekend_freeze, {"to_day": "Friday", "to_time": "16:00"})
	errs := gated.config_errors with data.gated.config.weekend_freeze as cfg
	errs == {"data.gated.config.weekend_freeze: the window starts and ends at the same time"}
}

# --- data.yaml's year-end change freeze (the default change_freeze rule) -----

test_year_end_freeze_denies_a_write_on_christmas_eve if {
	"change_freeze" in denied_rules(wf_proposal, "2026-12-24T10:00:00Z")
	msg := denial_message(wf_proposal, "2026-12-24T10:00:00Z", "change_freeze")
	contains(msg, `"year-end"`)
	contains(msg, "until 2027-01-04T00:00:00Z")
}

test_year_end_freeze_is_over_on_january_5 if {
	rs := denied_rules(wf_proposal, "2027-01-05T10:00:00Z")
	not "change_freeze" in rs
}

test_year_end_freeze_ends_january_4 if {
	"change_freeze" in denied_rules(wf_proposal, "2027-01-03T23:59:59Z")
	rs := denied_rules(wf_proposal, "2027-01-04T00:00:00Z")
	not "change_freeze" in rs
}

test_year_end_freeze_leaves_unlisted_tenants_alone if {
	p := object.union(wf_proposal, {"tenant": "acme"})
	rs := denied_rules(p, "2026-12-24T10:00:00Z")
	not "change_freeze" in rs
}
