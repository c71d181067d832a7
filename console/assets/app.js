// @ts-check
// gated's console: one page, routed by the URL's fragment. Every piece of
// data is put in the page with textContent (h below), never as HTML.
import { importSeed, sign } from "./nkey.js";

/** @typedef {import("./nkey.js").OperatorKey} OperatorKey */

/**
 * @typedef {object} Me
 * @property {boolean} signed_in
 * @property {string} [operator]
 * @property {string} [key]
 * @property {string[]} [tenants]
 * @property {string} [expires]
 */

/**
 * @typedef {object} Verdict
 * @property {string} proposal_id
 * @property {string} tenant
 * @property {string} action
 * @property {string} kind
 * @property {string} outcome
 * @property {string} stage
 * @property {string} reason
 * @property {string} decided_at
 * @property {string} [proposal_sha256]
 * @property {number} audit_seq
 * @property {{denies: {rule: string, message: string}[], rules?: string[], rules_more?: number, route?: string, revision: string}} [policy]
 * @property {Review[]} [reviews]
 * @property {{run_id: string, round: number, max_rounds: number, awaiting_operator?: string[], criteria?: {id: string, pass: boolean, judged_by?: string}[]}} [run]
 */

/**
 * @typedef {object} Review
 * @property {string} plugin
 * @property {string} persona
 * @property {string} decision
 * @property {string} decision_text
 * @property {{name: string, passed: boolean, detail?: string}[]} [gates]
 */

/**
 * @typedef {object} Held
 * @property {string} kind
 * @property {string[]} [criteria]
 * @property {string} [reason]
 * @property {string} [rule]
 * @property {string} [deadline]
 */

/** The operator's signing key, in this page's memory only. @type {OperatorKey | null} */
let operatorKey = null;
/** Who is signed in. @type {Me} */
let me = { signed_in: false };
/** The live feed's connection, closed when the page changes. @type {EventSource | null} */
let feed = null;

/**
 * Makes an element. Strings among children become text nodes; props set
 * attributes, except "text" (textContent) and "on*" (listeners).
 * @param {string} tag
 * @param {Record<string, any>} [props]
 * @param {...(Node | string | null | undefined)} children
 * @returns {HTMLElement}
 */
function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") el.textContent = String(v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    el.append(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return el;
}

/**
 * Calls the console's API. Errors carry the server's message.
 * @param {string} path
 * @param {RequestInit} [init]
 * @returns {Promise<any>}
 */
async function api(path, init) {
  const res = await fetch(path, { credentials: "same-origin", ...init });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const err = new Error(body.error || res.statusText);
    // @ts-ignore: the status rides along for callers that branch on it
    err.status = res.status;
    throw err;
  }
  return body;
}

/**
 * POSTs JSON to the API.
 * @param {string} path
 * @param {any} body
 */
function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
}

const main = /** @type {HTMLElement} */ (document.getElementById("main"));
const who = /** @type {HTMLElement} */ (document.getElementById("who"));

/**
 * Shows content as the page.
 * @param {...Node} nodes
 */
function show(...nodes) {
  main.replaceChildren(...nodes);
}

/**
 * An error line.
 * @param {unknown} err
 */
function errorLine(err) {
  return h("p", { class: "error", role: "alert", text: err instanceof Error ? err.message : String(err) });
}

/**
 * @param {string} s
 */
function when(s) {
  if (!s) return "";
  const d = new Date(s);
  return isNaN(d.getTime()) ? s : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

/**
 * A link to a proposal's page.
 * @param {string} tenant
 * @param {string} id
 */
function proposalLink(tenant, id) {
  return h("a", { href: `#/p/${encodeURIComponent(tenant)}/${encodeURIComponent(id)}`, text: id });
}

/**
 * An outcome badge.
 * @param {string} outcome
 */
function badge(outcome) {
  return h("span", { class: `badge ${outcome}`, text: outcome });
}

/**
 * A table.
 * @param {string[]} head
 * @param {(Node | string)[][]} rows
 * @param {Record<string, any>} [props]
 */
function table(head, rows, props = {}) {
  return h(
    "table",
    props,
    h("thead", {}, h("tr", {}, ...head.map((c) => h("th", { text: c })))),
    h("tbody", {}, ...rows.map((r) => h("tr", {}, ...r.map((c) => h("td", {}, c))))),
  );
}

// Sign-in --------------------------------------------------------------

function signInPage() {
  const seed = /** @type {HTMLTextAreaElement} */ (h("textarea", { id: "seed", rows: 3, autocomplete: "off", spellcheck: "false", placeholder: "SU…" }));
  const status = h("p", { id: "signin-status" });
  const form = h(
    "form",
    {
      id: "signin",
      onsubmit: async (/** @type {Event} */ ev) => {
        ev.preventDefault();
        status.replaceChildren();
        try {
          await signIn(seed.value);
          seed.value = "";
          route();
        } catch (err) {
          seed.value = "";
          status.replaceChildren(errorLine(err));
        }
      },
    },
    h("h2", { text: "Sign in" }),
    h("p", {
      text: "Paste your operator seed (the file gated operator keygen wrote). It stays in this page: the browser signs a challenge with it and gated checks the signature against its operators file.",
    }),
    h("label", { for: "seed", text: "Seed" }),
    seed,
    h("button", { type: "submit", id: "signin-button", text: "Sign in" }),
    status,
  );
  show(form);
}

/**
 * Imports the seed, answers a challenge with it, and keeps the key.
 * @param {string} text
 */
async function signIn(text) {
  const k = await importSeed(text);
  const { challenge, prefix } = await api("/api/challenge");
  const sig = await sign(k, new TextEncoder().encode(prefix + challenge));
  me = { signed_in: true, ...(await post("/api/signin", { key: k.publicKey, challenge, sig })) };
  operatorKey = k;
}

/**
 * Asks for the seed again to sign a decision after a reload.
 * @param {(k: OperatorKey) => void} then
 */
function unlockForm(then) {
  const seed = /** @type {HTMLTextAreaElement} */ (h("textarea", { class: "unlock-seed", rows: 2, autocomplete: "off", spellcheck: "false", placeholder: "SU…" }));
  const status = h("span");
  return h(
    "form",
    {
      class: "unlock",
      onsubmit: async (/** @type {Event} */ ev) => {
        ev.preventDefault();
        try {
          const k = await importSeed(seed.value);
          seed.value = "";
          if (k.publicKey !== me.key) throw new Error("this seed is not the signed-in operator's");
          operatorKey = k;
          then(k);
        } catch (err) {
          seed.value = "";
          status.replaceChildren(errorLine(err));
        }
      },
    },
    h("p", { text: "Paste your seed to sign decisions in this page (it is kept in memory only):" }),
    seed,
    h("button", { type: "submit", text: "Unlock" }),
    status,
  );
}

// Feed -----------------------------------------------------------------

/**
 * A row of the feed.
 * @param {Verdict} v
 */
function feedRow(v) {
  return h(
    "tr",
    { "data-key": `${v.tenant}.${v.proposal_id}`, class: "verdict" },
    h("td", { text: when(v.decided_at) }),
    h("td", { text: v.tenant }),
    h("td", {}, proposalLink(v.tenant, v.proposal_id)),
    h("td", { text: v.action }),
    h("td", {}, badge(v.outcome)),
    h("td", { text: v.stage }),
    h("td", { class: "reason", text: v.reason }),
  );
}

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 * @param {URLSearchParams} params
 */
async function feedPage(show, params) {
  const tenant = /** @type {HTMLInputElement} */ (h("input", { name: "tenant", id: "f-tenant", placeholder: "tenant", value: params.get("tenant") || "" }));
  const outcome = /** @type {HTMLSelectElement} */ (
    h("select", { name: "outcome", id: "f-outcome" }, ...["", "approved", "rejected", "blocked", "error", "timeout", "invalid"].map((o) => h("option", { value: o, text: o || "any outcome", selected: o === (params.get("outcome") || "") })))
  );
  const action = /** @type {HTMLInputElement} */ (h("input", { name: "action", id: "f-action", placeholder: "action", value: params.get("action") || "" }));
  const filters = h(
    "form",
    {
      class: "filters",
      onsubmit: (/** @type {Event} */ ev) => {
        ev.preventDefault();
        const q = new URLSearchParams();
        if (tenant.value) q.set("tenant", tenant.value);
        if (outcome.value) q.set("outcome", outcome.value);
        if (action.value) q.set("action", action.value);
        location.hash = `#/feed?${q}`;
      },
    },
    tenant,
    outcome,
    action,
    h("button", { type: "submit", text: "Filter" }),
  );
  const body = h("tbody", { id: "feed-rows" });
  const live = h("span", { id: "live", class: "live", text: "connecting…" });
  show(
    h("h2", {}, "Verdicts ", live),
    filters,
    h("table", { id: "feed" }, h("thead", {}, h("tr", {}, ...["decided", "tenant", "proposal", "action", "outcome", "stage", "reason"].map((c) => h("th", { text: c })))), body),
  );
  const q = new URLSearchParams();
  for (const k of ["tenant", "outcome", "action"]) {
    const v = params.get(k);
    if (v) q.set(k, v);
  }
  // The stream opens first, so that no verdict falls between the list and
  // the stream; a verdict in both is shown once.
  feed = new EventSource(`/api/feed?${q}`);
  feed.onopen = () => {
    live.textContent = "live";
    live.classList.add("on");
  };
  feed.onerror = () => {
    live.textContent = "reconnecting…";
    live.classList.remove("on");
  };
  feed.addEventListener("verdict", (ev) => {
    const v = /** @type {Verdict} */ (JSON.parse(/** @type {MessageEvent} */ (ev).data));
    body.querySelector(`tr[data-key="${CSS.escape(`${v.tenant}.${v.proposal_id}`)}"]`)?.remove();
    body.prepend(feedRow(v));
  });
  feed.addEventListener("expired", () => route());
  try {
    const { verdicts } = await api(`/api/verdicts?${q}`);
    for (const v of /** @type {Verdict[]} */ (verdicts)) {
      if (!body.querySelector(`tr[data-key="${CSS.escape(`${v.tenant}.${v.proposal_id}`)}"]`)) body.append(feedRow(v));
    }
  } catch (err) {
    if (body.isConnected) main.append(errorLine(err));
  }
}

// Proposal -------------------------------------------------------------

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 * @param {string} tenant
 * @param {string} id
 */
async function proposalPage(show, tenant, id) {
  show(h("h2", { text: `${tenant} / ${id}` }), h("p", { text: "loading…" }));
  let p;
  try {
    p = await api(`/api/proposals/${encodeURIComponent(tenant)}/${encodeURIComponent(id)}`);
  } catch (err) {
    show(h("h2", { text: `${tenant} / ${id}` }), errorLine(err));
    return;
  }
  /** @type {Verdict | null} */
  const v = p.verdict;
  const parts = [h("h2", { id: "proposal-title", text: `${tenant} / ${id}` })];
  if (!v) {
    parts.push(h("p", { text: "No verdict is stored: never decided, under review, or past the verdict TTL." }));
  } else {
    parts.push(
      h(
        "dl",
        { class: "summary" },
        h("dt", { text: "outcome" }),
        h("dd", {}, badge(v.outcome)),
        h("dt", { text: "stage" }),
        h("dd", { text: v.stage }),
        h("dt", { text: "action" }),
        h("dd", { text: `${v.action} (${v.kind})` }),
        h("dt", { text: "reason" }),
        h("dd", { id: "verdict-reason", text: v.reason }),
        h("dt", { text: "decided" }),
        h("dd", { text: when(v.decided_at) }),
        h("dt", { text: "policy revision" }),
        h("dd", { text: v.policy?.revision || "" }),
      ),
    );
    if (p.held) parts.push(h("p", { class: "held", text: `Held for an operator (${p.held.kind}): ${heldText(p.held)}` }), h("a", { href: "#/queue", text: "decide in the queue" }));
    const denies = v.policy?.denies || [];
    parts.push(h("h3", { text: "Policy" }));
    const decided = policyDecided(v);
    if (decided) parts.push(h("p", { id: "policy-decided", text: decided }));
    parts.push(denies.length ? table(["rule", "message"], denies.map((d) => [d.rule, d.message]), { id: "denies" }) : h("p", { text: "no denies" }));
    parts.push(h("h3", { text: "Reviews" }));
    for (const r of v.reviews || []) {
      parts.push(
        h(
          "section",
          { class: "review" },
          h("h4", { text: `${r.persona} by ${r.plugin}: ${r.decision}` }),
          h("pre", { text: r.decision_text || "" }),
          r.gates?.length ? table(["gate", "passed", "detail"], r.gates.map((g) => [g.name, g.passed ? "yes" : "no", g.detail || ""])) : null,
        ),
      );
    }
    if (!v.reviews?.length) parts.push(h("p", { text: "no reviews" }));
  }
  parts.push(h("h3", { text: "Proposal" }), h("pre", { id: "proposal-json", text: p.proposal ? JSON.stringify(p.proposal, null, 2) : "not in the audit records" }));
  parts.push(
    h("h3", { text: "Audit records" }),
    h("p", { text: p.macs_checked ? "hashes, chain links and MACs checked" : "hashes and chain links checked; MACs not checked (the console has no audit key)" }),
    table(
      ["seq", "event", "at", "verified", "data"],
      /** @type {{seq: number, event: string, at: string, verified: boolean, problems?: {kind: string, detail: string}[], data?: any}[]} */ (p.audit).map((a) => [
        String(a.seq),
        a.event,
        when(a.at),
        h("span", { class: a.verified ? "ok" : "error", text: a.verified ? "verified" : (a.problems || []).map((x) => `${x.kind}: ${x.detail}`).join("; ") }),
        h("details", {}, h("summary", { text: "data" }), h("pre", { text: JSON.stringify(a.data ?? null, null, 2) })),
      ]),
      { id: "audit" },
    ),
  );
  if (p.chain_problems) parts.push(h("p", { class: "error", text: `${p.chain_problems} problems elsewhere in tenant ${tenant}'s chain: run gated audit verify` }));
  show(...parts);
}

/**
 * The rule that decided a verdict's policy step: the rules that denied
 * it, when any did (the route it would have taken then decides nothing),
 * else the routing rule, which decided alone at the policy stage and sent
 * the proposal on to review otherwise.
 * @param {Verdict} v
 */
function policyDecided(v) {
  const rules = v.policy?.rules || [];
  if (rules.length) {
    const more = v.policy?.rules_more ? ` and ${v.policy.rules_more} more` : "";
    return `denied by rule${rules.length > 1 ? "s" : ""} ${rules.join(", ")}${more}`;
  }
  if (!v.policy?.route) return "";
  return v.stage === "policy" ? `decided by rule ${v.policy.route}` : `sent on to review by rule ${v.policy.route}`;
}

/**
 * @param {Held} held
 */
function heldText(held) {
  if (held.kind === "run") return `manual criteria ${(held.criteria || []).join(", ")}`;
  return [held.reason, held.rule && `rule ${held.rule}`, held.deadline && `deadline ${when(held.deadline)}`].filter(Boolean).join("; ");
}

// Queue ----------------------------------------------------------------

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 */
async function queuePage(show) {
  show(h("h2", { text: "Awaiting an operator" }), h("p", { text: "loading…" }));
  let items;
  try {
    ({ items } = await api("/api/queue"));
  } catch (err) {
    show(h("h2", { text: "Awaiting an operator" }), errorLine(err));
    return;
  }
  const list = /** @type {{verdict: Verdict, held: Held}[]} */ (items);
  show(
    h("h2", { text: "Awaiting an operator" }),
    h("p", { text: list.length ? "Oldest first." : "Nothing is waiting." }),
    h("div", { id: "queue" }, ...list.map(queueItem)),
  );
}

/**
 * One held verdict, with the form that decides it.
 * @param {{verdict: Verdict, held: Held}} item
 */
function queueItem(item) {
  const v = item.verdict;
  const result = h("div", { class: "result" });
  const section = h(
    "section",
    { class: "held-item", "data-key": `${v.tenant}.${v.proposal_id}` },
    h("h3", {}, `${v.tenant} / `, proposalLink(v.tenant, v.proposal_id)),
    h("p", { text: `${v.action}, held since ${when(v.decided_at)}${item.held.deadline ? `, deadline ${when(item.held.deadline)}` : ""}` }),
    h("p", { class: "reason", text: v.reason }),
  );
  if (item.held.kind === "action") {
    section.append(h("p", { text: heldText(item.held) }), actionForm(v, result), result);
    return section;
  }
  if (item.held.kind !== "run") {
    section.append(h("p", { text: heldText(item.held) }), result);
    return section;
  }
  const criteria = (item.held.criteria || []).map((id) => ({
    id,
    pass: /** @type {HTMLSelectElement} */ (h("select", { name: `pass-${id}`, "data-criterion": id }, h("option", { value: "pass", text: "pass" }), h("option", { value: "fail", text: "fail" }))),
    reason: /** @type {HTMLInputElement} */ (h("input", { name: `reason-${id}`, placeholder: "why (a failure's reason is what the worker fixes)" })),
  }));
  const reason = /** @type {HTMLInputElement} */ (h("input", { name: "reason", placeholder: "reason, for the verdict and the audit trail" }));
  const form = decideForm(v, result, reason,
    () => criteria.map((c) => ({ id: c.id, pass: c.pass.value === "pass", reason: c.reason.value.trim() })),
    ...criteria.map((c) => h("div", { class: "criterion" }, h("label", { text: c.id }), c.pass, c.reason)));
  section.append(form, result);
  return section;
}

/**
 * The form that approves or rejects a held action.
 * @param {Verdict} v
 * @param {HTMLElement} result
 * @returns {HTMLElement}
 */
function actionForm(v, result) {
  const choice = /** @type {HTMLSelectElement} */ (h("select", { name: "decision" }, h("option", { value: "approve", text: "approve" }), h("option", { value: "reject", text: "reject" })));
  const reason = /** @type {HTMLInputElement} */ (h("input", { name: "reason", placeholder: "reason, for the verdict and the audit trail" }));
  return decideForm(v, result, reason, () => ({ decision: choice.value }), choice);
}

/**
 * A form that signs and sends a decision on held verdict v: judged reads
 * what the operator chose from the fields, the answer goes to result.
 * @param {Verdict} v
 * @param {HTMLElement} result
 * @param {HTMLInputElement} reason
 * @param {() => ({id: string, pass: boolean, reason: string}[] | {decision: string})} judged
 * @param {...HTMLElement} fields
 * @returns {HTMLElement}
 */
function decideForm(v, result, reason, judged, ...fields) {
  const form = h(
    "form",
    {
      class: "decide",
      onsubmit: async (/** @type {Event} */ ev) => {
        ev.preventDefault();
        result.replaceChildren();
        const send = async (/** @type {OperatorKey} */ k) => {
          try {
            const decided = await decide(k, v, judged(), reason.value.trim());
            result.replaceChildren(h("p", { class: "decided" }, "Decided: ", badge(decided.outcome), ` ${decided.reason}`));
            form.remove();
          } catch (err) {
            result.replaceChildren(errorLine(err));
          }
        };
        if (operatorKey) await send(operatorKey);
        else result.replaceChildren(unlockForm((k) => send(k)));
      },
    },
    ...fields,
    reason,
    h("button", { type: "submit", class: "decide-button", text: "Sign and send" }),
  );
  return form;
}

/**
 * Signs an operator decision on a held verdict over the exact body
 * `gated operator decide` signs (operator.Message's JSON: v, tenant,
 * proposal_id, proposal_sha256, operator, then criteria for a held run or
 * decision for a held action, reason, signed_at) and sends it; gated
 * verifies it as it verifies the CLI's.
 * @param {OperatorKey} k
 * @param {Verdict} v
 * @param {{id: string, pass: boolean, reason: string}[] | {decision: string}} judged
 * @param {string} reason
 * @returns {Promise<Verdict>}
 */
async function decide(k, v, judged, reason) {
  /** @type {Record<string, unknown>} */
  const message = {
    v: 1,
    tenant: v.tenant,
    proposal_id: v.proposal_id,
    proposal_sha256: v.proposal_sha256 || "",
    operator: me.operator,
  };
  if (Array.isArray(judged)) {
    message.criteria = judged.map((c) => (c.reason ? { id: c.id, pass: c.pass, reason: c.reason } : { id: c.id, pass: c.pass }));
  } else {
    message.decision = judged.decision;
  }
  message.reason = reason;
  message.signed_at = new Date().toISOString();
  const body = JSON.stringify(message);
  const sig = await sign(k, new TextEncoder().encode(body));
  return post("/api/decisions", { body, key: k.publicKey, sig });
}

// Runs and system --------------------------------------------------------

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 */
async function runsPage(show) {
  let runs;
  try {
    ({ runs } = await api("/api/runs"));
  } catch (err) {
    show(h("h2", { text: "Runs" }), errorLine(err));
    return;
  }
  const list = /** @type {{tenant: string, run_id: string, task_id?: string, closed?: string, rounds: {round: number, proposal_id: string, outcome: string, next?: string, decided_at: string}[]}[]} */ (runs);
  show(
    h("h2", { text: "Runs" }),
    list.length ? h("div", { id: "runs" }, ...list.map((r) =>
      h(
        "section",
        { class: "run" },
        h("h3", { text: `${r.tenant} / ${r.run_id}${r.closed ? ` (${r.closed})` : ""}` }),
        table(["round", "proposal", "outcome", "follow-up", "decided"], r.rounds.map((rd) => [String(rd.round), proposalLink(r.tenant, rd.proposal_id), badge(rd.outcome), rd.next || "", when(rd.decided_at)])),
      ),
    )) : h("p", { text: "No run has a decided round." }),
  );
}

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 */
async function systemPage(show) {
  let sys;
  try {
    sys = await api("/api/system");
  } catch (err) {
    show(h("h2", { text: "System" }), errorLine(err));
    return;
  }
  const plugins = /** @type {{name: string, version: string, running: boolean, pid: number}[]} */ (sys.plugins || []);
  const parts = [
    h("h2", { text: "System" }),
    h("h3", { text: "Plugins" }),
    table(["plugin", "version", "health", "pid"], plugins.map((p) => [p.name, p.version || "", h("span", { class: p.running ? "ok" : "error", text: p.running ? "running" : "down" }), String(p.pid || "")]), { id: "plugins" }),
    h("h3", { text: "Policy" }),
    h("p", { id: "policy-revision", text: sys.policy ? `revision ${sys.policy.revision}${sys.policy.stale ? " (stale: the latest reload failed)" : ""}` : "unknown" }),
  ];
  parts.push(h("h3", { text: "Shadow policy" }));
  if (sys.shadow) parts.push(h("p", { text: `revision ${sys.shadow.revision}${sys.shadow.stale ? " (stale)" : ""}` }));
  try {
    const { hours, summary } = await api("/api/shadow?hours=24");
    if (!summary.decisions) {
      parts.push(h("p", { id: "shadow", text: `No proposal was decided with a shadow policy in the last ${hours} hours.` }));
    } else {
      parts.push(
        h("p", { id: "shadow", text: `Last ${hours} hours: ${summary.decisions} decisions, ${summary.differences} differences, agreement ${(summary.agreement * 100).toFixed(2)}%.` }),
        table(
          ["proposal", "kinds", "rules", "live", "shadow"],
          /** @type {{tenant: string, proposal_id: string, kinds: string[], rules?: string[], live: {outcome: string}, shadow: {outcome: string}}[]} */ (summary.first).map((d) => [
            proposalLink(d.tenant, d.proposal_id),
            d.kinds.join(", "),
            (d.rules || []).join(", "),
            d.live.outcome,
            d.shadow.outcome,
          ]),
          { id: "shadow-differences" },
        ),
      );
    }
  } catch (err) {
    parts.push(errorLine(err));
  }
  show(...parts);
}

// Reviewers and budgets ----------------------------------------------------

/**
 * @typedef {object} ReviewerStats
 * @property {string} plugin
 * @property {string} plugin_version
 * @property {string} persona
 * @property {string} model
 * @property {number} reviews
 * @property {number} approvals
 * @property {number} rejections
 * @property {number} approved_succeeded
 * @property {number} approved_failed
 * @property {number | null} approved_then_failed_rate
 * @property {number} operator_overrides
 * @property {number | null} latency_p50_ms
 * @property {number | null} latency_p99_ms
 */

/** The windows the reviewers page offers. */
const windows = ["1h", "24h", "7d"];

/**
 * A number with digits after the point, or "-" for none.
 * @param {number | null | undefined} n
 * @param {number} digits
 */
function fixed(n, digits) {
  return n === null || n === undefined ? "-" : n.toFixed(digits);
}

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 * @param {URLSearchParams} params
 */
async function reviewersPage(show, params) {
  const since = params.get("since") || "24h";
  const choice = /** @type {HTMLSelectElement} */ (
    h(
      "select",
      { id: "r-since", name: "since", onchange: () => (location.hash = `#/reviewers?since=${encodeURIComponent(choice.value)}`) },
      ...[...new Set([...windows, since])].map((w) => h("option", { value: w, text: `last ${w}`, selected: w === since })),
    )
  );
  const title = h("h2", { text: "Reviewers" });
  show(title, choice, h("p", { text: "loading…" }));
  let page;
  try {
    page = await api(`/api/reviewers?since=${encodeURIComponent(since)}`);
  } catch (err) {
    show(title, choice, errorLine(err));
    return;
  }
  const rows = /** @type {ReviewerStats[]} */ (page.reviewers);
  const scope = page.tenants.length ? `tenants ${page.tenants.join(", ")}` : "every tenant";
  const head = ["plugin", "version", "persona", "model", "reviews", "approved", "rejected", "succeeded", "failed", "failed rate", "overrides", "p50 ms", "p99 ms"];
  show(
    title,
    choice,
    h("p", {
      text: `Each reviewer's track record since ${when(page.from)} on ${scope}, as gated report reviewers gives it: approved-then-failed counts the approved verdicts whose grant was last reported succeeded or failed; overrides, the operator decisions that differ from the reviewer's.`,
    }),
    rows.length
      ? h(
          "table",
          { id: "reviewers" },
          h("thead", {}, h("tr", {}, ...head.map((c) => h("th", { text: c })))),
          h(
            "tbody",
            {},
            ...rows.map((r) =>
              h(
                "tr",
                { "data-key": [r.plugin, r.plugin_version, r.persona, r.model].join("/") },
                ...[
                  r.plugin || "-",
                  r.plugin_version || "-",
                  r.persona || "-",
                  r.model || "-",
                  String(r.reviews),
                  String(r.approvals),
                  String(r.rejections),
                  String(r.approved_succeeded),
                  String(r.approved_failed),
                  fixed(r.approved_then_failed_rate, 3),
                  String(r.operator_overrides),
                  fixed(r.latency_p50_ms, 1),
                  fixed(r.latency_p99_ms, 1),
                ].map((c, i) => h("td", { "data-col": head[i], text: c })),
              ),
            ),
          ),
        )
      : h("p", { id: "reviewers-none", text: "No review in this window." }),
  );
}

/**
 * @typedef {object} Rate
 * @property {number} max
 * @property {string} interval
 */

/**
 * @typedef {object} Usage
 * @property {string} scope
 * @property {string} [agent]
 * @property {boolean} [override]
 * @property {{proposals: Rate, reads: Rate, tokens: Rate, reviews_in_flight: number, holds_pending: number}} limits
 * @property {{proposals: number, reads: number, tokens: number, reviews_in_flight: number, holds_pending: number, refusals_10m: number, budget_refusals_10m: number}} counters
 * @property {Record<string, string>} resets_at
 */

/**
 * A windowed count beside its rate and when it resets.
 * @param {number} n
 * @param {Rate} r
 * @param {string | undefined} resets
 */
function rateCell(n, r, resets) {
  const limit = r.max ? `${r.max}/${r.interval}` : "unlimited";
  return h("span", {}, `${n} of ${limit}`, resets ? h("small", { class: "resets", text: ` resets ${when(resets)}` }) : null);
}

/**
 * A lease count beside its limit and when the earliest lease ends.
 * @param {number} n
 * @param {number} max
 * @param {string | undefined} resets
 */
function leaseCell(n, max, resets) {
  return h("span", {}, `${n} of ${max || "unlimited"}`, resets ? h("small", { class: "resets", text: ` first ends ${when(resets)}` }) : null);
}

/**
 * One scope's row of a tenant's budget table.
 * @param {string} name
 * @param {Usage} u
 */
function usageRow(name, u) {
  const c = u.counters;
  const l = u.limits;
  const cells = [
    h("span", {}, name, u.override ? h("small", { class: "override", text: " (own limits)" }) : null),
    rateCell(c.proposals, l.proposals, u.resets_at.proposals),
    rateCell(c.reads, l.reads, u.resets_at.reads),
    rateCell(c.tokens, l.tokens, u.resets_at.tokens),
    leaseCell(c.reviews_in_flight, l.reviews_in_flight, u.resets_at.reviews_in_flight),
    leaseCell(c.holds_pending, l.holds_pending, u.resets_at.holds_pending),
    `${c.refusals_10m} (${c.budget_refusals_10m} by budget)`,
  ];
  const cols = ["scope", "proposals", "reads", "tokens", "reviews in flight", "holds pending", "refusals 10m"];
  return h("tr", { "data-scope": u.scope === "tenant" ? "tenant" : `agent:${u.agent || ""}` }, ...cells.map((c, i) => h("td", { "data-col": cols[i] }, c)));
}

/**
 * @param {(...nodes: Node[]) => void} show draws the page while its navigation is the newest
 */
async function budgetsPage(show) {
  const title = h("h2", { text: "Budgets" });
  show(title, h("p", { text: "loading…" }));
  let page;
  try {
    page = await api("/api/budgets");
  } catch (err) {
    show(title, errorLine(err));
    return;
  }
  const tenants = /** @type {{tenant: string, whole: Usage, agents: Usage[], refused_10m: {scope: string, agent?: string, limit: string, count: number, last: string}[]}[]} */ (page.tenants);
  const parts = [
    title,
    h("p", { text: `Limits of ${page.file ? `the budgets file ${page.file}` : "the built-in budgets"}; counters as gated keeps them, each windowed count beside when its window ends. Read-only.` }),
  ];
  if (!tenants.length) parts.push(h("p", { text: "No tenant has counters or limits of its own." }));
  for (const t of tenants) {
    parts.push(
      h(
        "section",
        { class: "budget", "data-tenant": t.tenant },
        h("h3", { text: t.tenant }),
        h(
          "table",
          { class: "budget-table" },
          h("thead", {}, h("tr", {}, ...["scope", "proposals", "reads", "tokens", "reviews in flight", "holds pending", "refusals 10m"].map((c) => h("th", { text: c })))),
          h("tbody", {}, usageRow("tenant", t.whole), ...t.agents.map((a) => usageRow(`agent ${a.agent || "(none)"}`, a))),
        ),
        h("h4", { text: "Budget refusals in the last ten minutes" }),
        t.refused_10m.length
          ? table(["scope", "limit", "refused", "last"], t.refused_10m.map((r) => [r.scope === "agent" ? `agent ${r.agent || "(none)"}` : "tenant", r.limit, String(r.count), when(r.last)]), { class: "refused" })
          : h("p", { text: "none" }),
      ),
    );
  }
  show(...parts);
}

// Routing ----------------------------------------------------------------

/**
 * Counts navigations. Each page draws through a show that does nothing once
 * a newer navigation began, so a page still loading when the operator moved
 * on cannot draw over the page they moved to (and take the form they are
 * filling in).
 */
let navigation = 0;

async function route() {
  const nav = ++navigation;
  /** @param {...Node} nodes */
  const draw = (...nodes) => {
    if (nav === navigation) show(...nodes);
  };
  feed?.close();
  feed = null;
  try {
    me = await api("/api/me");
  } catch (err) {
    draw(errorLine(err));
    return;
  }
  if (nav !== navigation) return;
  who.replaceChildren();
  if (!me.signed_in) {
    operatorKey = null;
    signInPage();
    return;
  }
  const tenants = me.tenants?.length ? me.tenants.join(", ") : "every tenant";
  who.append(
    h("span", { id: "operator", text: `${me.operator} (${tenants})` }),
    h("button", {
      id: "signout",
      text: "Sign out",
      onclick: async () => {
        await post("/api/signout", {});
        operatorKey = null;
        route();
      },
    }),
  );
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  switch (parts[0] || "feed") {
    case "p":
      return proposalPage(draw, parts[1] || "", parts[2] || "");
    case "queue":
      return queuePage(draw);
    case "runs":
      return runsPage(draw);
    case "system":
      return systemPage(draw);
    case "reviewers":
      return reviewersPage(draw, new URLSearchParams(query || ""));
    case "budgets":
      return budgetsPage(draw);
    default:
      return feedPage(draw, new URLSearchParams(query || ""));
  }
}

window.addEventListener("hashchange", () => route());
route();
