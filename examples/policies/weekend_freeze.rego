# Example custom rule: no changes over the weekend.
#
# Nobody wants to be paged on a Saturday for a change an agent made on
# Friday evening. weekend_freeze refuses mutating proposals (class write or
# destructive) inside a weekly window, read on the wall clock of one time
# zone, so "Friday 16:00" means 16:00 in the office's time zone, summer
# time included:
#
#   weekend_freeze:
#     timezone: Europe/Berlin   # IANA name; default UTC
#     from_day: Friday          # first day, in English; default Friday
#     from_time: "16:00"        # 24-hour HH:MM, inclusive; default 16:00
#     to_day: Monday            # default Monday
#     to_time: "06:00"          # exclusive; default 06:00
#     tenants: [initech]        # optional: default every tenant
#     allow_incidents: true     # optional: proposals with an incident_id pass
#
# Without data.gated.config.weekend_freeze the rule does nothing. The
# window may wrap past Sunday midnight (Friday to Monday) or not (Tuesday
# 22:00 to Wednesday 02:00 for a weekly maintenance slot).
#
# The default bundle's change_freeze rule covers one-off date ranges
# (config.change_freezes); this rule covers a window that repeats every week.
package gated

deny contains {"rule": "weekend_freeze", "message": msg} if {
	mutating
	weekend_freeze_covers_tenant
	weekend_freeze_in_force
	not weekend_freeze_incident_exempt
	msg := sprintf(
		"weekend freeze (%s %s to %s %s, %s) is in force until %s%s",
		[
			weekend_freeze_config.from_day, weekend_freeze_config.from_time,
			weekend_freeze_config.to_day, weekend_freeze_config.to_time,
			weekend_freeze_config.timezone, weekend_freeze_ends, weekend_freeze_incident_hint,
		],
	)
}

# weekend_freeze_config is the configured window over the defaults; it is
# undefined, and so is every rule below, when the window is not configured.
weekend_freeze_config := object.union(
	{
		"timezone": "UTC",
		"from_day": "Friday",
		"from_time": "16:00",
		"to_day": "Monday",
		"to_time": "06:00",
		"allow_incidents": false,
	},
	data.gated.config.weekend_freeze,
)

weekend_freeze_covers_tenant if not weekend_freeze_config.tenants

weekend_freeze_covers_tenant if input.proposal.tenant in weekend_freeze_config.tenants

# An incident fix must be able to go out at 3 a.m. on a Sunday: that is what
# the incident_id on a proposal is for.
weekend_freeze_incident_exempt if {
	weekend_freeze_config.allow_incidents == true
	is_string(input.proposal.incident_id)
	input.proposal.incident_id != ""
}

weekend_freeze_incident_hint := "; proposals with an incident_id are exempt" if {
	weekend_freeze_config.allow_incidents == true
} else := ""

# --- the weekly window -------------------------------------------------------

# Times are compared as minutes since Monday 00:00 on the zone's wall clock.
# Seconds are dropped, so 15:59:59 is before a 16:00 start and 05:59:59 is
# still before a 06:00 end.

week_minutes := 7 * 1440

weekday_numbers := {
	"Monday": 0, "Tuesday": 1, "Wednesday": 2, "Thursday": 3,
	"Friday": 4, "Saturday": 5, "Sunday": 6,
}

weekend_freeze_now := ((weekday_numbers[day] * 1440) + (clock[0] * 60)) + clock[1] if {
	at := [now_ns, weekend_freeze_config.timezone]
	day := time.weekday(at)
	clock := time.clock(at)
}

weekend_freeze_from := week_minute(weekend_freeze_config.from_day, weekend_freeze_config.from_time)

weekend_freeze_to := week_minute(weekend_freeze_config.to_day, weekend_freeze_config.to_time)

week_minute(day, hhmm) := (weekday_numbers[day] * 1440) + clock_minutes(hhmm)

# clock_minutes("16:00") is 960. "16:00" reads as the duration "16h00m",
# which also copes with the leading zero of "06:00" (to_number does not).
clock_minutes(hhmm) := time.parse_duration_ns(sprintf("%sm", [replace(hhmm, ":", "h")])) / 60000000000 if {
	valid_clock(hhmm)
}

valid_clock(hhmm) if {
	is_string(hhmm)
	regex.match(`^([01][0-9]|2[0-3]):[0-5][0-9]$`, hhmm)
}

# A window inside one week: Tuesday 22:00 to Wednesday 02:00.
weekend_freeze_in_force if {
	weekend_freeze_from < weekend_freeze_to
	weekend_freeze_from <= weekend_freeze_now
	weekend_freeze_now < weekend_freeze_to
}

# A window across Sunday midnight: Friday 16:00 to Monday 06:00.
weekend_freeze_in_force if {
	weekend_freeze_from > weekend_freeze_to
	weekend_freeze_from <= weekend_freeze_now
}

weekend_freeze_in_force if {
	weekend_freeze_from > weekend_freeze_to
	weekend_freeze_now < weekend_freeze_to
}

# weekend_freeze_ends names the end of the window in force, with its date,
# so an agent knows when to try again: "Monday 2026-11-30 06:00".
weekend_freeze_ends := sprintf("%s %04d-%02d-%02d %s", [weekend_freeze_config.to_day, y, m, d, weekend_freeze_config.to_time]) if {
	minutes_left := ((weekend_freeze_to - weekend_freeze_now) + week_minutes) % week_minutes
	minute_of_day := weekend_freeze_now % 1440
	days_ahead := ((minute_of_day + minutes_left) - clock_minutes(weekend_freeze_config.to_time)) / 1440

	# Count the days from noon UTC of today's local date, so that neither
	# the zone's offset nor a summer time switch can shift the date.
	today := time.date([now_ns, weekend_freeze_config.timezone])
	noon := time.parse_rfc3339_ns(sprintf("%04d-%02d-%02dT12:00:00Z", today))
	[y, m, d] := time.date(time.add_date(noon, 0, 0, days_ahead))
}

# --- data validation ---------------------------------------------------------

# gated refuses a bundle with config_errors at load, so a misspelt zone or
# day fails at start-up instead of silently never freezing anything: with a
# zone OPA does not know, time.clock fails and the rule would not match.
config_errors contains sprintf("data.gated.config.weekend_freeze.timezone: %s is not an IANA time zone such as \"Europe/Berlin\"", [json.marshal(tz)]) if {
	tz := weekend_freeze_config.timezone
	not known_timezone(tz)
}

config_errors contains sprintf("data.gated.config.weekend_freeze.%s: %s is not a day such as \"Friday\"", [key, json.marshal(value)]) if {
	some key in ["from_day", "to_day"]
	value := weekend_freeze_config[key]
	not weekday_numbers[value]
}

config_errors contains sprintf("data.gated.config.weekend_freeze.%s: %s is not a 24-hour time such as \"16:00\"", [key, json.marshal(value)]) if {
	some key in ["from_time", "to_time"]
	value := weekend_freeze_config[key]
	not valid_clock(value)
}

config_errors contains "data.gated.config.weekend_freeze: the window starts and ends at the same time" if {
	weekend_freeze_from == weekend_freeze_to
}

known_timezone(tz) if {
	is_string(tz)
	time.clock([0, tz])
}
