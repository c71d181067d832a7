package gated

import "fmt"

// MaxLabels bounds the labels a proposal may add to its action's.
const MaxLabels = 16

// ValidLabel reports whether s can be a flow label: [a-z0-9_-]{1,64}, as
// a tenant is spelled.
func ValidLabel(s string) bool { return ValidTenant(s) }

// validateLabels checks a proposal's labels member.
func validateLabels(labels []string) error {
	if len(labels) > MaxLabels {
		return fieldErr("labels", "has %d labels, more than %d", len(labels), MaxLabels)
	}
	for i, l := range labels {
		if !ValidLabel(l) {
			return fieldErr(fmt.Sprintf("labels[%d]", i), "%q must match [a-z0-9_-]{1,64}", clip(l))
		}
	}
	return nil
}
