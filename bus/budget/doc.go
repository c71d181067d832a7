// Package budget keeps gated's budgets: per tenant and per agent, the
// proposals and read proposals of each window, the reviewer tokens spent,
// the reviews in flight and the actions pending an operator, in the
// GATED_BUDGETS JetStream key-value bucket shared by every gated process,
// and the limits of a budgets file. A [Store] implements engine.Budgets;
// docs/BUDGETS.md describes the design.
package budget
