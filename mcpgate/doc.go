// Package mcpgate puts gated in front of a Model Context Protocol server,
// so that an agent that speaks MCP and knows nothing of NATS or gated is
// governed by gated's policy and reviewers.
//
// A Gate is an MCP server that offers its agent an upstream MCP server as
// it is (tools, resources, prompts, completion, logging, progress,
// sampling and elicitation), over an upstream session of the agent
// session's own, every forwarded request bounded by a deadline. Each
// tools/call, resource read and prompt get becomes a proposal, published
// through the fleet client (bus/fleet) with every trust check it makes,
// and reaches the upstream server only when gated approves it (a read the
// local policy evaluation approves passes without one). Any other
// verdict, or no verdict, comes back to the agent as a tool result with
// isError set whose text is the verdict's reason and id: the upstream
// server never sees the call.
//
// How a tool becomes a proposal (its action, class, target, reason and
// blast radius) is the Mapping of docs/MCP.md: defaults from the tool's
// name, annotations and arguments, overridden per tool by a Catalog.
package mcpgate
