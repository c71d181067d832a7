#!/usr/bin/env bash
# mutants.sh takes each hard rule out of gated in turn and checks that the
# tests notice: a rule whose removal leaves every test green is a rule no
# test protects.
#
# It copies the repository's files (tracked and untracked, not ignored, as
# they are in the working tree) to a temporary directory, runs the packages
# the mutants need once unchanged (they must pass), then for each mutant:
# replaces one exact piece of text in one file of the copy, checks that the
# mutated copy still compiles, runs the packages that must catch it, and
# puts the file back. The working tree is never touched.
#
# Each mutant is KILLED (some test failed) or SURVIVED (every test passed).
# A mutation whose text is not found exactly once is an error: the source
# moved on and the mutant below must be updated, not skipped. The script
# exits non-zero if any mutant survived, did not apply or did not compile.
#
# Usage: bash test/mutants.sh [NAME...]   (no name: every mutant)
#        make mutants
set -euo pipefail
export LC_ALL=C

GO=${GO:-go}
root=$(git rev-parse --show-toplevel)

# --- the mutants ---------------------------------------------------------------
#
# mutant NAME FILE PACKAGES OLD NEW: in FILE, replace the one occurrence of
# OLD with NEW, then run `go test PACKAGES`. OLD is plain text, matched
# exactly (white space included); keep it short and specific so it is easy
# to update when the code around it changes.
names=() files=() pkgs=() olds=() news=()
mutant() { names+=("$1") files+=("$2") pkgs+=("$3") olds+=("$4") news+=("$5"); }

# Rego rules are removed by renaming their head from `deny` to a rule
# nothing reads, so the body still compiles and only the refusal goes.
removed="removed_by_mutant contains"

# policies/hard_rules.rego
mutant no_skip_review policies/hard_rules.rego ./policies \
	'deny contains {"rule": "no_skip_review",' \
	"$removed"' {"rule": "no_skip_review",'
mutant unsupported_force_approve policies/hard_rules.rego ./policies \
	$'deny contains {"rule": "unsupported_force_approve", "message": msg} if {\n\tinput.proposal.flags.force_approve == true\n' \
	"$removed"$' {"rule": "unsupported_force_approve", "message": msg} if {\n\tinput.proposal.flags.force_approve == true\n'
mutant force_approve_no_sop policies/hard_rules.rego ./policies \
	$'deny contains {"rule": "unsupported_force_approve", "message": msg} if {\n\tinput.proposal.flags.force_approve_no_sop == true\n' \
	"$removed"$' {"rule": "unsupported_force_approve", "message": msg} if {\n\tinput.proposal.flags.force_approve_no_sop == true\n'
mutant skill_wildcard policies/hard_rules.rego ./policies \
	'baseline_denied_patterns := ["*_skill"]' \
	'baseline_denied_patterns := []'
mutant baseline_denied_names policies/hard_rules.rego ./policies \
	'baseline_denied_names := {"run_shell", "execute_skill", "host_restart_service", "kill_process"}' \
	'baseline_denied_names := set()'
# The reviewer's tool bag keeps only tools the catalog lists as read.
mutant reviewer_read_tools_only policies/hard_rules.rego ./policies \
	$'denied_tools contains tool if {\n\tsome tool in input.persona.tools\n\tnot data.gated.tools[tool].class == "read"\n}' \
	$'removed_by_mutant contains tool if {\n\tsome tool in input.persona.tools\n\tnot data.gated.tools[tool].class == "read"\n}'
# Only a persona with permission_mode read-only may review.
mutant reviewer_read_only_persona policies/hard_rules.rego ./policies \
	'deny contains {"rule": "reviewer_tool_denied",' \
	"$removed"' {"rule": "reviewer_tool_denied",'
mutant class_mismatch policies/hard_rules.rego ./policies \
	'deny contains {"rule": "class_mismatch",' \
	"$removed"' {"rule": "class_mismatch",'
mutant self_review policies/hard_rules.rego ./policies \
	'deny contains {"rule": "self_review",' \
	"$removed"' {"rule": "self_review",'

# policies/operations.rego
mutant denied_action policies/operations.rego ./policies \
	'deny contains {"rule": "denied_action",' \
	"$removed"' {"rule": "denied_action",'
mutant parallel_operation policies/operations.rego ./policies \
	'deny contains {"rule": "parallel_operation",' \
	"$removed"' {"rule": "parallel_operation",'
mutant target_cooldown policies/operations.rego ./policies \
	'deny contains {"rule": "target_cooldown",' \
	"$removed"' {"rule": "target_cooldown",'
mutant recent_failure policies/operations.rego ./policies \
	'deny contains {"rule": "recent_failure",' \
	"$removed"' {"rule": "recent_failure",'
mutant change_freeze policies/operations.rego ./policies \
	'deny contains {"rule": "change_freeze",' \
	"$removed"' {"rule": "change_freeze",'

# Decision-line authority. Judge (engine/review.go) reads the decision
# from the reviewer's text with readDecision (ParseDecision's reading); the first mutant makes it
# trust the plugin's structured decision instead. The second makes
# ParseDecision (decision.go) approve whatever it is given: it
# replaces the function's first line, so it applies whatever the body is.
mutant decision_line_trusts_plugin engine/review.go './engine ./plugins' \
	'decision, parsed, overruled := readDecision(res.Text)' \
	'decision, parsed, overruled := res.Decision, "the plugin said so", false'
mutant decision_line_accepts_anything decision.go '. ./engine ./plugins' \
	$'func ParseDecision(text string) (ReviewDecision, string) {\n' \
	$'func ParseDecision(text string) (ReviewDecision, string) {\n\tif true {\n\t\treturn DecisionApprove, "reviewer approved"\n\t}\n'

# Required gates (engine/review.go, Judge): every gate the persona lists
# must be reported as passed. The mutant checks no gate.
mutant required_gates engine/review.go './engine ./plugins' \
	'for _, g := range persona.RequiredGates {' \
	'for _, g := range []string(nil) {'

# A failed review's verdict (engine/review.go, reviewAnswered) says in
# gated's words which reviewer failed and how; the reviewer's error (a
# plugin's panic with its stack and build paths, its own text) goes to the
# audit record and gated's log only. The mutant appends the error to the
# reason and the failed review's notes, as gated did before.
mutant review_error_in_verdict engine/review.go './engine ./plugins' \
	'out.why, out.failure = failureSentence(plugin, persona, failure, timeout)' \
	'out.why, out.failure = failureSentence(plugin, persona, failure, timeout); out.why += ": " + err.Error()'

# A reviewer that could not be routed (engine/quorum.go, engine/unrouted.go):
# the verdict says in gated's words which reviewer and why; the router's
# error, which quotes what a plugin printed instead of its handshake, goes
# to the review.unrouted record and gated's log only. The first two mutants
# append the error to the blocked reason and to a skipped candidate's, as
# gated did before; the third takes any failure a router names.
mutant unrouted_error_in_verdict engine/quorum.go ./engine \
	'routed.Persona.Name, r.unrouted(ctx, routed.Persona, err)))' \
	'routed.Persona.Name, r.unrouted(ctx, routed.Persona, err)+": "+err.Error()))'
mutant unrouted_skip_error_in_verdict engine/quorum.go ./engine \
	'return c, nil, r.unrouted(ctx, routed.Persona, err)' \
	'return c, nil, r.unrouted(ctx, routed.Persona, err) + ": " + err.Error()'
mutant unrouted_failure_named_by_router engine/unrouted.go ./engine \
	'case FailureNotStarted, FailureNotConfigured, FailureStopped:' \
	'default:'

# A reviewer is named by the name gated's configuration gives its plugin
# (plugins/review.go, result), and what it reports about itself is kept as
# one short line of printable ASCII (engine/review.go, Judge;
# internal/reviewtext/selfreported.go). The mutants name it by its Describe, keep its
# name, version or model as reported, keep every line, every character, or
# any length.
mutant plugin_self_named plugins/review.go ./plugins \
	'Plugin: name, PluginVersion: desc.GetVersion(),' \
	'Plugin: desc.GetName(), PluginVersion: desc.GetVersion(),'
mutant self_reported_plugin engine/review.go ./engine \
	'Plugin: reviewtext.SelfReported(res.Plugin),' \
	'Plugin: res.Plugin,'
mutant self_reported_version engine/review.go ./engine \
	'PluginVersion: reviewtext.SelfReported(res.PluginVersion),' \
	'PluginVersion: res.PluginVersion,'
mutant self_reported_model engine/review.go ./engine \
	'Model: reviewtext.SelfReported(res.Model),' \
	'Model: res.Model,'
mutant self_reported_first_line internal/reviewtext/selfreported.go './internal/reviewtext ./engine/...' \
	'if i := strings.IndexFunc(s, lineBreak); i >= 0 {' \
	'if i := strings.IndexFunc(s, lineBreak); false && i >= 0 {'
mutant self_reported_printable internal/reviewtext/selfreported.go './internal/reviewtext ./engine/...' \
	"if c < ' ' || c > '~' {" \
	'if false {'
mutant self_reported_length internal/reviewtext/selfreported.go './internal/reviewtext ./engine/...' \
	'const MaxSelfReportedBytes = 128' \
	'const MaxSelfReportedBytes = 1 << 20'

# The host's go-plugin client (plugins/process.go): mutual TLS to the
# plugin. The mutant neither hands the plugin the host's certificate nor
# dials with TLS, so both ends fall back to plaintext and reviews still work.
mutant automtls plugins/process.go ./plugins \
	'cmd.Env = append(append(minimalEnv(), p.spec.Env...), clientCertEnv+"="+certPEM)' \
	'cmd.Env, tlsConfig, _ = append(minimalEnv(), p.spec.Env...), nil, certPEM'

# A first delivery is decided without a look-up (engine/decide.go): its
# verdict, sealed, that finds another stored first is never the answer; the
# stored one is. A redelivery still looks the stored verdict up first, and
# so does a first delivery's approval before it joins its target, is
# granted or sealed.
mutant lost_race_own_verdict engine/decide.go ./engine \
	$'r.lostSeq = v.AuditSeq\n\t\treturn r.handOver(ctx, stored, true)' \
	$'r.lostSeq = v.AuditSeq\n\t\treturn v, nil'
mutant redelivery_lookup engine/decide.go ./engine \
	'if r.id != "" && r.d.Attempt != 1 {' \
	'if false {'
mutant first_approval_lookup engine/decide.go ./engine \
	'if r.d.Attempt == 1 && v.Approved {' \
	'if false {'

# A review claim (engine/claim.go) that replaced one stored before looks
# the verdict up: that claim's holder may have stored it. A claim created
# where none was looks nothing up, since a verdict stored by a review or by
# GiveUp (engine/engine.go) keeps its claim; the store says which it was
# (bus/store/claims.go).
mutant claim_replaced_lookup engine/claim.go ./engine \
	'case err == nil && !held.Replaced:' \
	'case err == nil:'
mutant claim_fresh_lookup engine/claim.go ./engine \
	'case err == nil && !held.Replaced:' \
	'case false:'
mutant giveup_keeps_claim engine/engine.go ./engine \
	$'case err == nil:\n\t\tkept = true' \
	$'case err == nil:\n\t\tkept = false'
mutant store_claim_replaced bus/store/claims.go ./bus/store \
	'c.Revision, c.Replaced = rev, true' \
	'c.Revision = rev'

# Same id, same content (engine/decide.go, answers): a verdict stored under
# an id goes only to a delivery of the same bytes, and one stored without
# a digest answers nothing. An operator's decision (engine/runflow.go)
# likewise matches no held verdict without a digest.
mutant same_id_any_content engine/decide.go ./engine \
	'return stored.ProposalSHA256 != "" && stored.ProposalSHA256 == r.digest' \
	'return true'
mutant same_id_empty_digest engine/decide.go ./engine \
	'return stored.ProposalSHA256 != "" && stored.ProposalSHA256 == r.digest' \
	'return stored.ProposalSHA256 == "" || stored.ProposalSHA256 == r.digest'
mutant operator_empty_digest engine/runflow.go ./engine \
	$'if held.ProposalSHA256 == "" || d.ProposalSHA256 != held.ProposalSHA256 {\n\t\t// A held verdict without a digest' \
	$'if d.ProposalSHA256 != held.ProposalSHA256 {\n\t\t// A held verdict without a digest'
mutant held_action_empty_digest engine/runflow.go ./engine \
	$'\t\tif held.ProposalSHA256 == "" || d.ProposalSHA256 != held.ProposalSHA256 {\n\t\t\treturn nil' \
	$'\t\tif d.ProposalSHA256 != held.ProposalSHA256 {\n\t\t\treturn nil'

# Held actions (engine/hold.go, engine/outcome.go, bus/operator/list.go): a
# held action is approved only by a decision signed with a listed key, of an
# operator of its tenant, before its deadline; it times out only at the
# deadline; and an action a hard rule denies is rejected, never held.
mutant held_action_deadline engine/hold.go ./engine \
	'if deadline := held.AwaitingOperator.Deadline; !now.Before(deadline) {' \
	'if deadline := held.AwaitingOperator.Deadline; false && !now.Before(deadline) {'
mutant held_action_expires_early engine/hold.go ./engine \
	'if now.Before(deadline) {' \
	'if false {'
mutant held_action_denied_first engine/outcome.go './engine ./policies' \
	'case len(s.Denies) > 0:' \
	'case len(s.Denies) > 0 && len(pd.Holds) == 0:'
mutant held_action_signature bus/operator/list.go ./bus/operator \
	'if err := pub.Verify(body, sig); err != nil {' \
	'if err := pub.Verify(body, sig); err != nil && false {'
mutant held_action_tenant_scope bus/operator/list.go ./bus/operator \
	'case !op.Allows(m.Tenant):' \
	'case false:'
# An operator's clear of an agent's flow state: signed by a listed key
# over the exact body, for a tenant the operator may act for, of the
# record's revision read (a replay clears nothing), audited before the
# record is removed.
mutant flow_clear_signature bus/operator/clear.go ./bus/operator \
	$'op, err := l.verifySignature(hdr, body)\n\tif err != nil {\n\t\treturn nil, op, err\n\t}\n' \
	$'op, _ := l.verifySignature(hdr, body)\n'
mutant flow_clear_tenant_scope bus/operator/clear.go ./bus/operator \
	'case !op.Allows(m.Tenant):' \
	'case false:'
mutant flow_clear_revision bus/operator/clear.go ./bus/operator \
	'case snap.Revision != m.Revision:' \
	'case false:'
mutant flow_clear_audit_first bus/operator/clear.go ./bus/operator \
	$'if err != nil {\n\t\tc.log.Error("auditing a flow clear"' \
	$'if err != nil && false {\n\t\tc.log.Error("auditing a flow clear"'

# One operation at a time on a target (engine/decide.go, engine/target.go,
# bus/store/history.go): an approval joins its target's history by
# compare-and-set before it is stored, and one that finds the history
# changed is decided again by the policy; an operator's approval of a held
# action is refused when another approval joined the target meanwhile.
mutant target_join engine/decide.go ./engine \
	'if v, err = r.joinTarget(ctx, v); err != nil {' \
	'if false {'
mutant target_recheck engine/target.go ./engine \
	'if out := r.recheck(ctx, v, h); out != nil {' \
	'if out := (*gated.Verdict)(nil); out != nil {'
# The re-check also refuses an approval when the policy, on the changed
# history, asks for more than it had (a hold, a review, another persona, a
# larger quorum, fewer reviewer tools), and that refusal is not remembered
# for dedupe, so the proposal sent again is decided afresh.
mutant target_recheck_asks engine/target.go ./engine \
	'asks = r.asksMore(ctx, pd, in)' \
	'asks = nil'
mutant target_changed_not_deduped engine/dedupe.go ./engine \
	'slices.Contains(v.Policy.Rules, RuleTargetChanged) {' \
	'slices.Contains(v.Policy.Rules, RuleTargetChanged) && false {'
mutant target_held_recheck engine/target.go ./engine \
	'if d := joinedWhileHeld(held, h, now); d != nil {' \
	'if d := (*gated.Deny)(nil); d != nil {'
mutant target_join_cas bus/store/history.go ./bus/store \
	'rev, err = s.kv.Update(ctx, key, data, h.Revision)' \
	'rev, err = s.kv.Put(ctx, key, data)'

# Grants: a grant is usable only as the stored verdict carries it (not the
# grant of a delivery that lost the store or crashed before it), and its
# use creates its record where none is, so that it is used once.
mutant grant_use_stored_verdict bus/grants/grantuse.go ./bus/grants \
	'case v.Grant != token:' \
	'case false:'
mutant grant_use_once bus/grants/grantuse.go ./bus/grants \
	'_, err := g.records.Create(ctx, key, data)' \
	'_, err := g.records.Put(ctx, key, data)'
# A use request is read strictly: with encoding/json's map, the last of two
# grants would win, and a proxy or log that keeps the first would read
# another token than gated.
mutant grant_use_refuses_duplicates bus/grants/grantuse.go ./bus/grants \
	'err := strictjson.Object(body, func(key string, value json.RawMessage) error {' \
	'err := func(b []byte, fn func(string, json.RawMessage) error) error { var m map[string]json.RawMessage; if err := json.Unmarshal(b, &m); err != nil { return err }; for k, v := range m { if err := fn(k, v); err != nil { return err } }; return nil }(body, func(key string, value json.RawMessage) error {'
# On an agent's subject a grant is used only by the agent it was issued to,
# and an outcome is taken in only from the agent that used the grant or
# that it was issued to: without these, an agent of a tenant spends
# another's approval, or makes up its failure and recent_failure denies
# the other's target.
mutant grant_use_from_owner bus/grants/grantuse.go ./bus/grants \
	'case agent != "" && v.Agent != agent:' \
	'case false && agent != "" && v.Agent != agent:'
mutant outcome_from_owner bus/grants/outcomes.go ./bus/grants \
	'case !mayReport(rec, as):' \
	'case false && !mayReport(rec, as):'

# The web console (console/): an operator sees and decides for the tenants
# the operators file allows, signs in with a signature over a fresh
# challenge, forwards only decisions signed with the signed-in key, and
# takes state-changing requests from its own origin only.
mutant console_tenant_scope console/server.go ./console \
	'if !ses.op.Allows(tenant) {' \
	'if false {'
mutant console_signin_signature console/server.go ./console \
	'err = pub.Verify([]byte(SignInPrefix+in.Challenge), in.Sig)' \
	'_, err = pub, nil'
mutant console_own_key console/decide.go ./console \
	'if d.Key != ses.op.Key {' \
	'if false {'
mutant console_same_origin console/server.go ./console \
	'why := crossOrigin(r)' \
	'why := ""'

# Records read back from the verdict bucket (bus/store/records.go) must be for
# their key: one mutant per kind skips that check.
mutant record_verdict_key bus/store/records.go ./bus/store \
	'case v.Tenant != tenant || v.ProposalID != id:' \
	'case false:'
mutant record_claim_key bus/store/records.go ./bus/store \
	'case c.Tenant != tenant || c.ProposalID != id:' \
	'case false:'
mutant record_run_key bus/store/records.go ./bus/store \
	'if rec.Tenant != tenant || rec.RunID != runID {' \
	'if false {'
mutant record_history_key bus/store/records.go ./bus/store \
	'case v.Tenant != tenant || v.TargetKey != target:' \
	'case false:'

# Strict decision reading (internal/reviewtext/decision.go): after an approving first
# line, a later decision line that is not an approval, or a retraction,
# rejects. Judge (engine/review.go) checks that the text's gate lines
# agree with the structured gates, and a gate passes only on an exact
# pass token (GatePasses, internal/reviewtext/gates.go); the last mutant makes any text that begins
# with one a pass ("pass-ish", "passed?").
mutant later_decision_line internal/reviewtext/decision.go './internal/reviewtext ./engine/...' \
	'if looksLikeDecisionLine(later) && !isDecisionLine(later, "approve") {' \
	'if false {'
mutant retraction internal/reviewtext/decision.go './internal/reviewtext ./engine/...' \
	'if phrase := retraction(later); phrase != "" {' \
	'if phrase := ""; phrase != "" {'
mutant gate_lines_checked engine/review.go ./engine \
	'if err := gated.CheckGateLines(res.Text, res.Gates); err != nil {' \
	'if err := error(nil); err != nil {'
mutant gate_pass_exact internal/reviewtext/gates.go './internal/reviewtext ./engine/... ./plugins/llm' \
	'if detail, ok := afterPass(after); ok {' \
	'if detail, _ := afterPass(after); true {'

# Runs that did not complete: the policy denies an unreviewed one
# (policies/runs.rego), and gated turns an approval of one whose status
# the policy does not accept into a rejection, both of a reviewer's
# approval (judgeRun) and of any approved verdict (finishRun).
mutant run_not_completed policies/runs.rego ./policies \
	'run_deny contains {"rule": "run_not_completed",' \
	'removed_by_mutant contains {"rule": "run_not_completed",'
mutant run_not_completed_review engine/runflow.go ./engine \
	'if outcome == gated.OutcomeApproved && !StatusAccepted(st.run.Status, st.policy.AcceptedStatus) {' \
	'if false {'
mutant run_not_completed_verdict engine/runflow.go ./engine \
	'if v.Outcome == gated.OutcomeApproved && st.run.Status != gated.RunCompleted {' \
	'if false {'

# An action pattern's * stays within one word of the action, in the policy
# (action_pattern_matches) and in Go (engine.MatchAction, which the SOP
# reviewer uses): the mutants let it cross "_".
mutant action_pattern_rego policies/gated.rego ./policies \
	'glob.match(pattern, ["_", "-"], action)' \
	'glob.match(pattern, null, action)'
mutant action_pattern_go pattern.go ./plugins/sop \
	'glob.Compile(pattern, []rune(ActionWordSeparators)...)' \
	'glob.Compile(pattern)'
# A dash separates the words of an action as an underscore does.
mutant action_dash_rego policies/gated.rego ./policies \
	'glob.match(pattern, ["_", "-"], action)' \
	'glob.match(pattern, ["_"], action)'
mutant action_dash_go pattern.go ./policies \
	'const ActionWordSeparators = "_-"' \
	'const ActionWordSeparators = "_"'

# A proposal's reviewer adds scrutiny: it reviews beside the routed
# persona (review.also), and replaces it only where reviewer_overrides
# allow. The first mutant lets it replace the routed persona in the
# policy; the second drops the added reviewers in the engine's quorum.
mutant proposal_reviewer_replaces policies/gated.rego ./policies \
	$'persona_name := proposal_reviewer if {\n\treviewer_override_allowed\n' \
	$'persona_name := proposal_reviewer if {\n\tproposal_reviewer\n'
mutant review_also_ignored engine/quorum.go ./engine \
	'for _, name := range pd.Review.Also {' \
	'for _, name := range []string(nil) {'

# Plugin pinning (plugins/image.go): the digest of the sealed copy must be
# the pinned one. Health checks (plugins/process.go): a plugin that misses
# HealthMisses checks in a row is killed and relaunched; the mutant never
# counts a miss.
mutant plugin_pin_compared plugins/image.go ./plugins \
	'if img.sha256 != spec.SHA256 {' \
	'if false {'
mutant health_misses_counted plugins/process.go ./plugins \
	$'\t\tmisses++\n' \
	$'\t\tmisses += 0\n'

# Start-up (bus/audit/key.go, bus/datadir.go, internal/server): the audit key
# must extend the stream's chain, serve checks it, and one serve holds a
# data directory.
mutant audit_key_checked bus/audit/key.go ./bus/audit \
	$'func CheckKey(ctx context.Context, js jetstream.JetStream, key []byte) error {\n' \
	$'func CheckKey(ctx context.Context, js jetstream.JetStream, key []byte) error {\n\tif true {\n\t\treturn nil\n\t}\n'
mutant serve_checks_audit_key internal/server/auditkey.go ./internal/server \
	'err = audit.CheckKey(checkCtx, js, key)' \
	'_, err = checkCtx, error(nil)'
mutant data_dir_locked bus/datadir.go ./bus \
	'held, err := lockFile(f)' \
	'held, err := false, error(nil)'
mutant serve_locks_data_dir internal/server/startup.go ./internal/server \
	'if lock, err = bus.LockDataDir(o.DataDir); err != nil {' \
	'if err != nil {'

# audit verify (bus/audit/verdictmerge.go, bus/audit/verify.go): a stored verdict
# whose record is not where its audit_seq says is reported, and so are
# sequences deleted from the end of the stream.
mutant verify_missing_record bus/audit/verdictmerge.go ./bus/audit \
	$'\t\t// ring: sv\'s audit_seq holds none.\n\t\treturn c.mismatch(ctx, sv)\n' \
	$'\t\t// ring: sv\'s audit_seq holds none.\n\t\treturn nil\n'
# A stored verdict that differs from its record, read again, is reported.
mutant verify_modified_verdict bus/audit/verdictmerge.go ./bus/audit \
	$'\tif matched {\n\t\tc.check.Matched++\n\t\treturn nil\n\t}\n\treturn c.mismatch(ctx, sv)\n' \
	$'\tif matched {\n\t\tc.check.Matched++\n\t\treturn nil\n\t}\n\treturn nil\n'
mutant verify_deleted_tail bus/audit/verify.go ./bus/audit \
	'if opts.Tenant == "" && v.report.Messages > 0 && info.State.LastSeq > v.report.LastSeq {' \
	'if false {'

# Without the verdict check, verify reads a record whose MAC verifies only
# for its tenant, chain and last event (bus/audit/keyedcheck.go): its
# subject must still name them.
mutant verify_keyed_subject bus/audit/keyedcheck.go ./bus/audit \
	'e.Subject != wire.AuditSubject(string(tenant), string(name))' \
	'false'

# Records (bus/audit/whole.go): a record holds at least one event, its
# subject names its last, every event is of the record's tenant, a
# verdict after its grant.issued leaves the grant's token out, and its MAC
# covers its body.
mutant record_has_events bus/audit/whole.go ./bus/audit \
	$'\tcase len(b.Events) == 0:\n' \
	$'\tcase false:\n'
mutant record_subject_names_last_event bus/audit/whole.go ./bus/audit \
	'if subject != wire.AuditSubject(b.Tenant, last) {' \
	'if false {'
mutant record_events_of_its_tenant bus/audit/whole.go ./bus/audit \
	'if ev.Tenant != b.Tenant {' \
	'if false {'
mutant record_drops_grant_token bus/audit/whole.go ./bus/audit \
	'data = withoutMember(data, "grant")' \
	'data = withoutMember(data, "none")'
# An event's data names each member once: the decoder refuses a record
# whose event data names one twice (verify reports it), and the engine
# drops the head's members an event's data names itself.
mutant record_data_members_once bus/audit/whole.go ./bus/audit \
	'return ev, membersOnce(ev.Data)' \
	'return ev, nil'
mutant event_head_yields_to_data engine/audit.go ./engine \
	'dropNamedBy(&common, extra)' \
	'_ = extra'
mutant record_mac_covers_body bus/audit/key.go ./bus/audit \
	'return ok && hmac.Equal([]byte(auditMAC(key, digest, r.V)), []byte(r.macText()))' \
	'return ok || hmac.Equal([]byte(auditMAC(key, digest, r.V)), []byte(r.macText()))'
# verify reads a version-2 MAC with the checker's keyed HMAC: it must match
# the body's digest, spelt the writer's way only.
mutant verify_v2_mac_matches bus/audit/recordcheck.go ./bus/audit \
	'return hmac.Equal(m.Sum(want[:0]), got[:])' \
	'return len(m.Sum(want[:0])) == len(got)'
mutant verify_v2_mac_strict bus/audit/recordcheck.go ./bus/audit \
	'var macEncoding = base64.RawURLEncoding.Strict()' \
	'var macEncoding = base64.RawURLEncoding'
# The gid print matches a folded grant to the stored token by its id: only
# the member spelt "grant" is the token, and only on the stored side.
mutant gid_print_grant_spelling bus/audit/quickprint.go ./bus/audit \
	'return bytes.EqualFold(key, []byte(`"grant"`)) || bytes.IndexByte(key, '"'"'\\'"'"') >= 0' \
	'return bytes.Equal(key, []byte(`"grant"`))'
mutant gid_print_record_has_no_grant bus/audit/quickprint.go ./bus/audit \
	'if string(key) != `"grant"` || gid != "" {' \
	'if string(key) != `"grant"` {'
mutant gid_print_needs_an_id bus/audit/quickprint.go ./bus/audit \
	$'\t\tif gid == "" {\n\t\t\treturn p, false\n' \
	$'\t\tif false {\n\t\t\treturn p, false\n'
# An event whose data is not JSON is refused before it reaches a record.
mutant audit_event_data_json bus/audit/writer.go ./bus/audit \
	'case len(t) > 0 && !jsonscan.Valid(t):' \
	'case len(t) < 0 && !jsonscan.Valid(t):'
# The one-pass proposal reader (decodefast.go) reads only what the
# strict reading accepts: a key twice or a key that is not, byte for
# byte, a field leaves the proposal to encoding/json and the key check.
mutant decode_fast_duplicate_key decodefast.go '. ./engine' \
	$'\t\t\tif bytes.Equal(k, key) {\n\t\t\t\treturn false\n' \
	$'\t\t\tif bytes.Equal(k, key) {\n\t\t\t\tbreak\n'
mutant decode_fast_exact_keys decodefast.go '. ./engine' \
	$'\t\tp.CreatedAt = t\n\t\treturn true\n\t}\n\treturn false\n' \
	$'\t\tp.CreatedAt = t\n\t\treturn true\n\t}\n\t_, ok := r.anyValue()\n\treturn ok\n'
# The planned evaluator keeps its lookups only into what cannot change: a
# lookup kept into a collection the evaluation still grows would decide on
# a member that is not there any more, or miss one that is.
mutant plan_dots_fixed_only policies/internal/plan/dots.go ./policies/internal/plan \
	$'\tif c == nil || !c.isFixed(src) {\n' \
	$'\tif c == nil {\n'
# The planned evaluator reads a reference into the base data as OPA's
# store reads it for topdown (policies/internal/plan/basedata.go):
# data.m[2] finds data.m["2"], a string indexes an array, and a key bound
# before a scan of base documents is compared the same way; a lookup in a
# local that may hold the base data or another value is refused.
mutant plan_base_keys policies/internal/plan/machine.go ./policies/internal/plan \
	$'\t\t\tif s.base {\n\t\t\t\tv = m.baseLookup(src, key)\n' \
	$'\t\t\tif false {\n\t\t\t\tv = m.baseLookup(src, key)\n'
mutant plan_base_scan_key policies/internal/plan/machine.go ./policies/internal/plan \
	$'\t\t\tif s.baseKey {\n' \
	$'\t\t\tif false {\n'
mutant plan_base_ambiguous_refused policies/internal/plan/basedata.go ./policies/internal/plan \
	'if h == holdsBase|holdsValue && bm.err == nil {' \
	'if false && bm.err == nil {'
# Budgets (bus/budget): a lease admits a redelivery without counting only
# while it is live; a refusal stands unless the proposal's own live lease
# admits it; a review's refusal is never followed by its lease.
mutant budget_expired_lease_admits bus/budget/leases.go ./bus/budget \
	$'return l != nil && l.End > ms(now)' \
	$'return l != nil'
mutant budget_refusal_reads_lease bus/budget/store.go ./bus/budget \
	$'\t\tif refusal != nil && !read {\n' \
	$'\t\tif false && refusal != nil && !read {\n'
mutant budget_refusal_stands bus/budget/store.go ./bus/budget \
	$'\t\tif err != nil || refusal != nil {\n\t\t\ts.emitAdmission(req, refusal, err)\n' \
	$'\t\tif err != nil {\n\t\t\ts.emitAdmission(req, refusal, err)\n'
# Reads admitted from leased blocks (bus/budget/allowance.go): a block is
# sized to what the window has left, the tenant's refusal puts the agent's
# read back, a block goes back only to the window it was leased from, and a
# read is admitted only from a block the record counted.
mutant budget_block_within_limit bus/budget/allowance.go ./bus/budget \
	'n := blockSize(r, c.used(gated.LimitReads, r, now), want)' \
	'n := max(want, 2)'
mutant budget_read_put_back bus/budget/allowance.go ./bus/budget \
	$'\tif a.holds(r, now) {\n\t\ta.left++' \
	$'\tif false {\n\t\ta.left++'
mutant budget_give_back_own_window bus/budget/counters.go ./bus/budget \
	'if !ok || w.Start != start || w.Interval != interval || n <= 0 {' \
	'if !ok || n <= 0 {'
# A request whose now lags the record's window counts in that later
# window: it never starts its own older window over the later count.
mutant budget_lagging_clock_counts_later bus/budget/counters.go ./bus/budget \
	'&& w.Start > start {' \
	'&& w.Start > start && false {'
mutant budget_idle_allowance_forgotten bus/budget/allowance.go ./bus/budget \
	$'\t\ta.gone = true\n\t\tdelete(s.allow, key)' \
	$'\t\ta.gone = true'
mutant budget_read_fails_closed bus/budget/allowance.go ./bus/budget \
	$'\t\tif err != nil {\n\t\t\t// The block may have been counted' \
	$'\t\tif false {\n\t\t\t// The block may have been counted'
# Refusal counts (bus/budget/refusals.go, engine/budget.go): a refusal is
# counted in the process, before its verdict returns, and written in the
# background; the policy of this process sees it at once, Stop writes it, a
# failed write keeps it, and a flush bounds its writes at once.
mutant budget_refusals_seen_at_once bus/budget/store.go ./bus/budget \
	$'\t\t\tst.Tenant = s.withPending(tenantKey(tenant), c.state(cfg.Tenant(tenant), now), now)' \
	$'\t\t\tst.Tenant = c.state(cfg.Tenant(tenant), now)'
mutant budget_refusals_stop_writes bus/budget/refusals.go ./bus/budget \
	'go func() { done <- s.flushRefusals() }()' \
	'go func() { done <- nil }()'
mutant budget_refusal_writes_bounded bus/budget/refusals.go ./bus/budget \
	'slots := make(chan struct{}, flushWrites)' \
	'slots := make(chan struct{}, len(writes)+1)'
mutant budget_refusals_kept_on_failure bus/budget/refusals.go ./bus/budget \
	$'\t\t\tfor _, r := range w.p.writing {\n\t\t\t\tw.p.counted.addRefusals(r)' \
	$'\t\t\tfor _, r := range w.p.writing[:0] {\n\t\t\t\tw.p.counted.addRefusals(r)'
mutant engine_refusal_counted engine/budget.go ./engine \
	'_ = b.Refused(context.WithoutCancel(ctx), r.tenant, budgetAgent(r.p), kind, r.start)' \
	'_ = kind'
# The budget counters a policy reads (policies/budgetref.go,
# policies/policy.go): gated skips reading them for a bundle that cannot
# reach input.budget. The first mutant takes a reference to input under a
# key that is not written out for one that cannot reach it; the second lets
# a bundle that reads input.budget evaluate an input whose counters were
# not read, so that it sees zeros.
mutant budget_ref_key_unknown policies/budgetref.go ./policies \
	'return !ok || string(k) == key' \
	'return ok && string(k) == key'
mutant budget_unread_refused policies/policy.go './policies ./bus/budget' \
	'if in.BudgetUnread && e.readsBudget {' \
	'if false {'

# Budgets read again (internal/server/budgets.go): an empty file does not put the
# defaults in force in place of the file's limits, and a change is taken up
# only once two polls in a row read it the same.
mutant budget_reload_refuses_empty internal/server/budgets.go ./internal/server \
	$'if len(bytes.TrimSpace(data)) == 0 {' \
	$'if false && len(bytes.TrimSpace(data)) == 0 {'
mutant budget_reload_settles internal/server/budgets.go ./internal/server \
	$'if f.seen == nil || !bytes.Equal(data, f.seen) {' \
	$'if false && (f.seen == nil || !bytes.Equal(data, f.seen)) {'
# Audit records (bus/audit/zstd.go): a compressed body is decompressed
# within MaxRecordJSON, so that a forged frame cannot make a reader hold
# more memory than a record of gated's needs.
mutant audit_decompress_bound bus/audit/zstd.go ./bus/audit \
	$'zstd.WithDecoderMaxMemory(MaxRecordJSON),' \
	$'zstd.WithDecoderMaxMemory(1 << 40),'
# ... and only when it is one frame and nothing after: a second frame, which
# a decoder concatenates and a reader stopping at the first does not, would
# show two readers two records.
mutant audit_one_frame bus/audit/zstd.go ./bus/audit \
	$'if err := oneFrame(body); err != nil {' \
	$'if err := oneFrame(body); false && err != nil {'
# Status events (bus/status, bus/fleet): a status nobody listens to is not
# sent, and one somebody follows is: the proposer's header, a watch's ask.
mutant status_only_when_listened bus/status/status.go ./bus/status \
	'if !follow && !p.wanted(subject) {' \
	'if false {'
mutant status_watch_bound_per_tenant bus/status/status.go ./bus/status \
	'if len(q) >= p.perTenant {' \
	'if false {'
mutant status_header_sent bus/fleet/client.go ./bus/fleet \
	'msg.Header.Set(wire.StatusHeader, "1")' \
	'_ = wire.StatusHeader'
mutant status_watch_asks bus/fleet/status.go ./bus/fleet \
	'	c.announceWatch(ctx, tenant, id)' \
	'	_ = c.announceWatch'
# Grants (bus/grants/grantsweep.go): a gated's sweep takes a grant only
# when its exp is due, and marks it expired only when the stored verdict
# carries it.
mutant grant_expired_only_stored bus/grants/grantsweep.go ./bus/grants \
	'if err != nil || sha256.Sum256([]byte(v.Grant)) != d.token {' \
	'if err != nil {'
mutant grant_due_only_when_due bus/grants/grantsweep.go ./bus/grants \
	$'if len(g.due) == 0 || g.due[0].exp > now {' \
	$'if len(g.due) == 0 {'

# What an executor runs is what gated decided on. gated mcp
# (mcpgate/mapping.go, gate.go) refuses arguments with two member names
# equal under case folding and arguments the tool's input schema does not
# allow, and its proposal carries every argument it forwards; gated itself
# refuses a proposal whose arguments fold together (decode.go); the
# Go tool gate runs the tool with the arguments it proposed, not the
# caller's value, and refuses arguments that fold together
# (bus/fleet/toolgate.go).
mutant mcp_arguments_folded mcpgate/mapping.go ./mcpgate \
	$'if err := strictjson.CheckFolded(obj); err != nil {' \
	$'if err := strictjson.CheckFolded(obj); false && err != nil {'
mutant mcp_arguments_schema mcpgate/mapping.go ./mcpgate \
	$'if err := m.allowed(fwd); err != nil {' \
	$'if err := m.allowed(fwd); false && err != nil {'
mutant mcp_proposal_carries_arguments mcpgate/gate.go ./mcpgate \
	$'\t\tArguments:      c.Arguments,\n' \
	$'\n'
# gated mcp gives each agent session an upstream session of its own, and
# bounds every request it forwards (mcpgate/upstream.go, results.go,
# relay.go).
mutant mcp_upstream_per_session mcpgate/upstream.go ./mcpgate \
	$'\tfirst := u.first\n\tu.first = nil\n' \
	$'\tfirst := u.first\n'
mutant mcp_forward_deadline mcpgate/results.go ./mcpgate \
	$'ctx, cancel := g.withDeadline(ctx)' \
	$'ctx, cancel := context.WithCancel(ctx)'
mutant mcp_relay_deadline mcpgate/relay.go ./mcpgate \
	$'timer = time.AfterFunc(timeout, func() {' \
	$'timer = time.AfterFunc(time.Hour, func() {'
# Over HTTP, gated mcp serves at most --max-sessions agent sessions, and
# ends one that idles out with its upstream session (mcpgate/http.go).
mutant mcp_session_cap mcpgate/http.go ./mcpgate \
	$'if p.free <= 0 {' \
	$'if false {'
mutant mcp_session_idle mcpgate/http.go ./mcpgate \
	$'SessionTimeout: idle}' \
	$'SessionTimeout: 0}'
# A resource read is decided before it reaches the upstream, and the
# upstream's sampling request is policy-visible (mcpgate/requests.go).
mutant mcp_resource_read_decided mcpgate/requests.go ./mcpgate \
	$'done, err := g.decideRequest(ctx, req.Session, m, map[string]any{"uri": uri})' \
	$'done, err := func(bool, string) {}, error(nil); _ = m'
mutant mcp_sampling_policy mcpgate/requests.go ./mcpgate \
	$'if settled && s.Outcome == gated.OutcomeRejected {\n\t\treturn nil, &jsonrpc.Error{Code: requestRefusedCode' \
	$'if false && settled && s.Outcome == gated.OutcomeRejected {\n\t\treturn nil, &jsonrpc.Error{Code: requestRefusedCode'
# A tool's catalog labels are on its proposals, and a labelled read is
# proposed, never approved locally, so its labels join the agent's flow
# state (mcpgate/gate.go, catalog.go).
mutant mcp_labelled_read_proposed mcpgate/gate.go ./mcpgate \
	$'|| g.cfg.ProposeReads || len(p.Labels) > 0 {' \
	$'|| g.cfg.ProposeReads {'
mutant mcp_proposal_carries_labels mcpgate/gate.go ./mcpgate \
	$'\t\tLabels:         m.Labels,\n' \
	$'\n'
mutant mcp_catalog_label_checked mcpgate/catalog.go ./mcpgate \
	$'if !gated.ValidLabel(l) {' \
	$'if false {'
mutant proposal_arguments_folded decode.go '. ./engine' \
	$'if fe, ok := errors.AsType[*strictjson.FoldError](strictjson.CheckFolded(p.Arguments)); ok {' \
	$'if fe, ok := errors.AsType[*strictjson.FoldError](strictjson.CheckFolded(p.Arguments)); false && ok {'
mutant guard_runs_reviewed bus/fleet/toolgate.go ./bus/fleet \
	$'r, runErr := fn(ctx, reviewed)' \
	$'r, runErr := fn(ctx, args)'
mutant guard_arguments_folded bus/fleet/toolgate.go ./bus/fleet \
	$'if err := strictjson.CheckFolded(arguments); err != nil {' \
	$'if err := strictjson.CheckFolded(arguments); false && err != nil {'

# /metrics answers without credentials (internal/server/metricslisten.go,
# metrics.go): the console's --http listener never serves it, --metrics-listen
# takes it off --http, and no metric names a tenant unless the operator asks
# with --metrics-tenant-labels.
mutant metrics_off_console_listener internal/server/metricslisten.go ./cmd/gated \
	$'case o.HTTPAddr != "" && o.Operators == "":' \
	$'case o.HTTPAddr != "":'
mutant metrics_listen_takes_metrics internal/server/http.go ./cmd/gated \
	$'if s.cfg.metricsListener() == "--http" {' \
	$'if s.cfg.metricsListener() == "--http" || s.cfg.MetricsListen != "" {'
mutant metrics_tenants_opt_in internal/server/metrics.go ./cmd/gated \
	$'func (m *metrics) namesTenants() bool { return m.tenantLabels }' \
	$'func (m *metrics) namesTenants() bool { return true }'

# gated verdict get reads a verdict whose key is gone from the audit trail
# only from a range whose MACs and chain verify.
mutant verdict_trail_verifies bus/audit/lookup.go ./cmd/gated \
	'if len(rep.Problems) > 0 {' \
	'if false {'
mutant verdict_trail_superseded bus/audit/lookup.go ./bus/audit \
	'if !superseded[found[i].Seq] {' \
	'if true {'
mutant verdict_trail_ambiguous bus/audit/lookup.go ./bus/audit \
	'if ambiguous {' \
	'if false {'
# serve refuses a verdict_ttl shorter than a target's history.
mutant verdict_ttl_min internal/server/config.go ./cmd/gated \
	'return max(store.HistoryWindow, operatorDeadline+grantTTL)' \
	'return time.Minute'

# The flow rules (policies/flows.rego, docs/POLICIES.md#flows): no egress
# after a private or secret read in the window, a state that cannot be read
# refuses when a rule is on, a write after untrusted content goes to
# review or is held; the rules read input.session only when data turns one
# on, and an input without the state is refused by a bundle that reads it.
mutant flow_egress_after_private policies/flows.rego './policies ./engine' \
	'deny contains {"rule": "flow_egress_after_private",' \
	"$removed"' {"rule": "flow_egress_after_private",'
mutant flow_egress_window policies/flows.rego './policies ./engine' \
	'action.at_ns > data.gated.now_ns - window_ns' \
	'action.at_ns > 0'
mutant flow_state_unreadable policies/flows.rego './policies ./engine' \
	$'deny contains {"rule": "flow_state_unreadable", "message": msg} if {' \
	"$removed"$' {"rule": "flow_state_unreadable", "message": msg} if {'
mutant flow_state_unread policies/flows.rego ./policies \
	$'deny contains {"rule": "flow_state_unreadable", "message": "the flow state' \
	"$removed"$' {"rule": "flow_state_unreadable", "message": "the flow state'
mutant flow_write_after_untrusted_review policies/gated.rego ./policies \
	$'\tflow_review\n} else := {' \
	$'\tfalse\n} else := {'
mutant flow_write_after_untrusted_hold policies/holds.rego ./policies \
	'hold contains object.union(held, hold_deadline) if {' \
	'removed_by_mutant contains object.union(held, hold_deadline) if {'
mutant flow_reads_session_when_on policies/flows.go './policies ./engine' \
	'if m.Package.Path.Equal(flowsPackage) && !flows.On {' \
	'if m.Package.Path.Equal(flowsPackage) {'
mutant flow_unread_refused policies/policy.go './policies ./engine' \
	'if in.SessionUnread && e.readsSession {' \
	'if false {'
# The flow state (bus/flow): changed by compare-and-set, so that two
# writers lose nothing; a corrupt record is never written over; and a
# grant's use records its action before the use is (internal/server).
mutant flow_cas bus/flow/store.go ./bus/flow \
	'_, err = s.kv.Update(ctx, key, data, rev)' \
	'_, err = s.kv.Put(ctx, key, data)'
mutant flow_corrupt_kept bus/flow/store.go ./bus/flow \
	$'\tif err != nil {\n\t\treturn record{}, 0, fmt.Errorf("reading the flow state %s: %w", key, err)\n\t}\n\treturn r, e.Revision(), nil' \
	$'\tif err != nil {\n\t\treturn record{V: recordVersion}, e.Revision(), nil\n\t}\n\treturn r, e.Revision(), nil'
mutant flow_recorded_on_use internal/server/flows.go ./internal/server \
	'labels := cfg.LabelsOf(use.Action, use.Labels)' \
	'labels := []string(nil)'
mutant flow_labels_of_proposal policies/flows.go './policies ./internal/server' \
	'out := append(slices.Clone(f.Labels[action]), extra...)' \
	'out := slices.Clone(f.Labels[action])'

# The map (docs/ARCHITECTURE.md, held by internal/archmap): a package
# moved into the layer of what it imports is an import sideways.
mutant archmap_layers docs/ARCHITECTURE.md ./internal/archmap \
	'| 3 | `engine` |' \
	'| 2 | `engine` |'

# Evidence (bus/evidence, docs/AUDIT.md#evidence): a signer that signs a
# head inconsistent with the last checkpoint, a verifier that takes two
# inconsistent checkpoints, one that takes a record whose proof fails.
mutant evidence_signer_consistency bus/evidence/checkpoint.go ./bus/evidence \
	'if err := tlog.CheckTree(p, n, root, last.Size, last.Root); err != nil {' \
	'if err := tlog.CheckTree(p, n, root, last.Size, last.Root); err != nil && false {'
mutant evidence_verify_consistency bus/evidence/verify.go ./bus/evidence \
	'if tlog.CheckTree(p, b.Size, b.Root, a.Size, a.Root) != nil {' \
	'if tlog.CheckTree(p, b.Size, b.Root, a.Size, a.Root) != nil && false {'
mutant evidence_verify_inclusion bus/evidence/verify.go ./bus/evidence \
	'} else if err := tlog.CheckRecord(l.proof, last.Size, last.Root, l.index, l.leaf); err != nil {' \
	'} else if false {'
# Keys a bundle carries (bus/evidence/forgery_test.go): a required witness
# matched by its name only, and a witness's signature taken for gated's.
mutant evidence_witness_by_hash bus/evidence/checkpoint.go ./bus/evidence \
	'if sig.Name == v.Name() && sig.Hash == v.KeyHash() {' \
	'if sig.Name == v.Name() {'
mutant evidence_witness_alone bus/evidence/verify.go ./bus/evidence \
	'_, err = Open(stripSigs([]byte(msg), witnessVs), gatedOnly, h.Tenant)' \
	'_, err = Open(stripSigs([]byte(msg), nil), all, h.Tenant); _ = gatedOnly'

# A --nats-url refused for its scheme is named without its credentials:
# url.Parse's error, or the URL as given, would show a password.
mutant nats_url_refusal_redacted internal/natsconn/natsconn.go ./internal/natsconn \
	$'\t\t\t\tRedactURL(s), u.Scheme)' \
	$'\t\t\t\ts, u.Scheme)'

# A gateway's batch of local decisions is recorded only for the tenant
# of its subject, and on an agent's subject only for that agent.
mutant local_batch_other_tenant bus/grants/local.go ./bus/grants \
	'if b.Tenant != tenant {' \
	'if false {'
mutant local_batch_other_agent bus/grants/local.go ./bus/grants \
	'if as != "" && d.Agent != as {' \
	'if false {'

# --- running them --------------------------------------------------------------

selected=("$@")
wanted() {
	((${#selected[@]} == 0)) && return 0
	local s
	for s in "${selected[@]}"; do [[ $s == "$1" ]] && return 0; done
	return 1
}
for s in "${selected[@]}"; do
	found=0
	for n in "${names[@]}"; do [[ $n == "$s" ]] && found=1; done
	((found)) || { echo "mutants: no mutant named $s (have: ${names[*]})" >&2; exit 2; }
done

work=$(mktemp -d -t gated-mutants.XXXXXX)
trap 'rm -rf "$work"' EXIT
src=$work/src
mkdir -p "$src"
(cd "$root" && git ls-files -z --cached --others --exclude-standard |
	tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -C "$src" -xf -

# replace FILE OLD NEW: the one occurrence of OLD in FILE becomes NEW.
replace() {
	local f=$src/$1 content rest n
	if [[ $2 == "$3" ]]; then
		echo "the mutation of $1 changes nothing: fix this mutant in test/mutants.sh" >&2
		return 1
	fi
	content=$(cat "$f" && printf x) && content=${content%x}
	rest=${content//"$2"/}
	n=$(((${#content} - ${#rest}) / ${#2}))
	if ((n != 1)); then
		echo "text found $n times in $1, want once: update this mutant in test/mutants.sh" >&2
		return 1
	fi
	printf '%s' "${content/"$2"/"$3"}" >"$f"
}

# compiles FILE PACKAGES: the mutated copy still builds (Go) or parses and
# compiles (Rego), so a failure of the tests is the tests' doing.
compiles() {
	case $1 in
	*.rego) (cd "$src" && $GO tool opa check "$(dirname "$1")") ;;
	*.go) (cd "$src" && $GO test -count=1 -run '^$' $2 >/dev/null) ;;
	esac
}

all_pkgs=()
for i in "${!names[@]}"; do
	wanted "${names[$i]}" && all_pkgs+=(${pkgs[$i]})
done
mapfile -t all_pkgs < <(printf '%s\n' "${all_pkgs[@]}" | sort -u)

start=$SECONDS
echo "mutants: unchanged copy first: go test ${all_pkgs[*]}"
if ! (cd "$src" && $GO test -count=1 "${all_pkgs[@]}" >"$work/baseline.log" 2>&1); then
	cat "$work/baseline.log"
	echo "mutants: the tests fail without any mutation; fix them first" >&2
	exit 2
fi

failed=0
results=()
for i in "${!names[@]}"; do
	name=${names[$i]} file=${files[$i]}
	wanted "$name" || continue
	cp "$src/$file" "$work/saved"
	t0=$SECONDS
	if ! replace "$file" "${olds[$i]}" "${news[$i]}"; then
		result="NOT APPLIED"
		failed=1
	elif ! compiles "$file" "${pkgs[$i]}" >"$work/$name.log" 2>&1; then
		cat "$work/$name.log" >&2
		result="DOES NOT COMPILE"
		failed=1
	elif (cd "$src" && $GO test -count=1 -failfast ${pkgs[$i]} >"$work/$name.log" 2>&1); then
		result="SURVIVED"
		failed=1
	else
		result="KILLED"
	fi
	cp "$work/saved" "$src/$file"
	line=$(printf '%-32s %-16s %-20s %4ds' "$name" "$result" "${pkgs[$i]}" $((SECONDS - t0)))
	echo "$line"
	if [[ $result == KILLED ]]; then
		# Which tests caught it, and the first thing they said (or the
		# panic, such as go test's timeout, that ended the package). A log
		# with none of these is no error: the mutant was still killed.
		{
			grep -E '^\s*--- FAIL' "$work/$name.log" | head -3 || true
			grep -E '^\s+[A-Za-z0-9_./-]+_test\.go:[0-9]+: ' "$work/$name.log" | head -2 | cut -c1-200 || true
			grep -E '^panic: ' "$work/$name.log" | head -1 | cut -c1-200 || true
		} | sed 's/^\s*/    /'
	fi
	results+=("$line")
done

echo
echo "mutants: ${#results[@]} run in $((SECONDS - start))s"
printf '%s\n' "${results[@]}"
if ((failed)); then
	echo "mutants: FAILED: a hard rule can be removed without a test failing, or a mutant is stale" >&2
	exit 1
fi
echo "mutants: every mutant killed"
