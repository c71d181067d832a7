package mcpgate

import "errors"

// Errors of the package. Test for them with errors.Is.
var (
	// ErrInvalidCatalog is wrapped by the errors of DecodeCatalog and of
	// New for a catalog that is unusable: malformed YAML or JSON, an
	// unknown field, a bad class, action, blast radius or target pointer,
	// or an entry for a tool the upstream server does not offer.
	ErrInvalidCatalog = errors.New("invalid MCP tool catalog")

	// ErrActionCollision is wrapped by New's error when two tools of the
	// upstream server map onto the same action token: their proposals
	// could not be told apart, so the gate refuses to start. Give one of
	// them its own action in the catalog.
	ErrActionCollision = errors.New("two MCP tools map onto one action")

	// ErrInvalidConfig is wrapped by New's error for an unusable Config:
	// no fleet client, no upstream session, a bad tenant or agent.
	ErrInvalidConfig = errors.New("invalid MCP gate configuration")

	// ErrBadArguments is wrapped by the error of Mapping.Proposal for a
	// call whose arguments cannot become a proposal: not a JSON object, a
	// reason argument that is not a string, a target pointer that names no
	// argument. Such a call is refused, never forwarded.
	ErrBadArguments = errors.New("tool call arguments cannot become a proposal")
)
