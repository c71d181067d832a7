// The v1 wire schema of proposals and verdicts (docs: DESIGN.md, FLEET.md),
// with gated's own JSON member names.

/** A proposal's class: the effect the action has on the world. */
export type ProposalClass = "read" | "write" | "destructive";

/** How much of the world a mutating action can touch. */
export type BlastRadius = "single_device" | "cluster" | "tenant_wide";

/** The outcome of a verdict; only "approved" lets an action run. */
export type Outcome = "approved" | "rejected" | "blocked" | "error" | "timeout" | "invalid";

/** The human on whose behalf an agent acts. */
export interface Operator {
  id: string;
  roles?: string[];
}

/** The agent that proposes; gated keeps it from reviewing its own proposal. */
export interface RequestedBy {
  agent: string;
  session?: string;
}

/** The requests an agent may attach; each defaults to false. */
export interface Flags {
  skip_review?: boolean;
  force_approve?: boolean;
  force_approve_no_sop?: boolean;
  user_confirmed?: boolean;
}

/** One acceptance criterion of a run review. */
export interface Criterion {
  id: string;
  description: string;
  required?: boolean;
  kind?: string;
  params?: Record<string, unknown>;
  evidence?: Record<string, unknown>;
}

/** One finding of a prior review round. */
export interface Finding {
  id: string;
  body: string;
  path?: string;
  line?: number | null;
  criterion?: string;
  status?: string;
}

/** A review of an earlier round of the same run. */
export interface PriorReview {
  proposal_id?: string;
  round: number;
  findings?: Finding[];
  summary?: string;
}

/** A finished run, for proposals of kind run. */
export interface Run {
  run_id: string;
  task_id?: string;
  status: string;
  summary?: string;
  diff?: string;
  test_output?: string;
  round: number;
  worker: string;
  prior_reviews?: PriorReview[];
}

/**
 * A proposal: what an agent publishes before it acts. Members are gated's
 * JSON names; `v` defaults to 1 and `flags` to all false.
 */
export interface Proposal {
  v?: number;
  id: string;
  tenant: string;
  kind?: "action" | "run";
  action: string;
  class: ProposalClass;
  target?: Record<string, unknown> | null;
  /**
   * The exact arguments the executor runs the action with, when it
   * forwards a call (gated mcp, the tool gates): the target says what the
   * action touches, the arguments all it is told. The policy and the
   * reviewer read them, and an approval's grant binds them through
   * proposal_sha256. No two member names of one object may be equal under
   * Unicode simple case folding ("host" and "hoſt"), at any depth: the
   * client refuses them (FoldedKeysError). Left out when empty.
   */
  arguments?: Record<string, unknown> | null;
  reason?: string;
  blast_radius?: BlastRadius;
  operator?: Operator | null;
  requested_by?: RequestedBy | null;
  incident_id?: string;
  context_summary?: string;
  flags?: Flags;
  reviewer?: string;
  criteria?: Criterion[] | null;
  run?: Run | null;
  /** RFC 3339, e.g. "2026-11-25T10:00:00Z", or a Date. */
  created_at?: string | Date | null;
  /** Flow labels added to the action's (docs/POLICIES.md#flows): at most 16, each [a-z0-9_-]{1,64}. */
  labels?: string[];
}

/** What a proposal must carry to be published: its tenant, id and action tokens. */
export interface Address {
  tenant: string;
  id: string;
  action: string;
}

/** One policy rule that denied a proposal. */
export interface Deny {
  rule?: string;
  message?: string;
}

/** One reviewer's review in a verdict. */
export interface Review {
  plugin?: string;
  plugin_version?: string;
  persona?: string;
  model?: string;
  decision_text?: string;
  decision?: string;
  gates?: { name?: string; passed?: boolean; detail?: string }[];
  missing_gates?: string[];
  sop_id?: string;
  rollback_path?: string;
  notes?: string;
  [member: string]: unknown;
}

/** Why an action's verdict waits for an operator, and until when. */
export interface OperatorHold {
  /** RFC 3339: when the hold ends in a timeout, never an approval. */
  deadline?: string;
  /** Why a person must decide. */
  reason?: string;
  /** The policy rule that held the action. */
  rule?: string;
}

/** An operator's decision on a held action, as its verdict records it. */
export interface OperatorDecision {
  /** The operator's id in gated's operator list. */
  id?: string;
  /** The public nkey that signed the decision. */
  key?: string;
  /** approve or reject. */
  decision?: string;
  reason?: string;
}

/** gated's answer to a proposal. */
export interface Verdict {
  v?: number;
  proposal_id: string;
  tenant: string;
  action?: string;
  kind?: string;
  /** One of Outcome; a newer gated may add outcomes, which are never approvals. */
  outcome: string;
  approved?: boolean;
  stage?: string;
  reason?: string;
  policy?: { denies?: Deny[]; revision?: string; eval_us?: number };
  reviews?: Review[];
  decided_at?: string;
  latency_ms?: number;
  audit_seq?: number;
  proposal_sha256?: string;
  target_key?: string;
  agent?: string;
  duplicate_of?: string;
  run?: Record<string, unknown>;
  /** Set on an action's verdict held for an operator: the verdict is not final (isFinal). */
  awaiting_operator?: OperatorHold;
  /** Set on the verdict of a held action an operator decided. */
  operator_decision?: OperatorDecision;
  /**
   * Set on every approval: gated's signed, single-use grant (a compact JWS,
   * docs/GRANTS.md). An executor verifies it and takes its use before it acts.
   */
  grant?: string;
}
