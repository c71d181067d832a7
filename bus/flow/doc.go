// Package flow keeps each agent's flow state: the labelled actions it
// executed over the flow window, which the flow rules read as
// input.session (docs/POLICIES.md#flows). The state lives in a JetStream
// key-value bucket every gated process shares, one record per tenant and
// agent, changed only by compare-and-set, so that no process loses
// another's action.
package flow
