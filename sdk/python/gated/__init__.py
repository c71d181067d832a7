"""gated: clients and reviewer plugins for gated, the policy gate for AI agent fleets."""
