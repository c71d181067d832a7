package wire

// ErrorCodes is how a refusal's status code (the micro error code header,
// Nats-Service-Error-Code) maps to the sentinel errors it matches. The
// review service's refusals (package fleet's ServiceError) and the
// operator endpoint's (package operator's Refusal) each keep one, so an
// error's Is method is a look-up in its table instead of a switch of its
// own.
type ErrorCodes map[int][]error

// Match reports whether a refusal with code matches target: whether
// target is one of the sentinels listed for code.
func (c ErrorCodes) Match(code int, target error) bool {
	for _, e := range c[code] {
		if e == target {
			return true
		}
	}
	return false
}
