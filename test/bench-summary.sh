#!/usr/bin/env bash
# bench-summary: the figures of a make bench run against their targets
# (docs/BENCHMARKS.md, Against the targets), read from the reports it left
# in a directory (default bench-results): one table of measure, figure,
# target and whether it is met. A report that is missing is shown as not
# measured: make bench-million writes million.json, make bench-messages
# messages.json, make bench-verify-cli verify.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "${1:-bench-results}" <<'PY'
import json, os, statistics, sys

d = sys.argv[1]

def load(name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    with open(p) as f:
        if name.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        return json.load(f)

def overall(rep, key="gated"):
    rows = rep.get(key) or []
    return next((r for r in rows if r["path"] == "all"), rows[0] if rows else {})

rows = []

def row(measure, figure, target, met):
    rows.append((measure, figure, target, "—" if met is None else ("yes" if met else "no")))

def ratio_row(measure, name, floor_target):
    rep = load(name)
    if rep is None:
        return row(measure, "not measured (" + name + ")", f"≥ {floor_target} × floor", None)
    ratios = rep.get("ratio") or {}
    r = ratios.get("all", next(iter(ratios.values())) if len(ratios) == 1 else None)
    if r is None:
        return row(measure, "no floor in " + name, f"≥ {floor_target} × floor", None)
    g, f = overall(rep), overall(rep, "floor")
    row(measure, f"{r:.2f} × floor ({g['per_second']:,.0f}/s against {f['per_second']:,.0f}/s)", f"≥ {floor_target} × floor", r >= floor_target)
    return rep

ratio_row("policy-decided, c=256", "policy.json", 0.5)
c32 = ratio_row("policy-decided, c=32", "policy-c32.json", 0.5)
opa = load("opa.json")
level = None
if opa:
    level = next((l for l in opa.get("levels", []) if l.get("concurrency") == 32), None)
if c32 is None or level is None:
    row("policy-decided, c=32, against OPA's REST server", "not measured (policy-c32.json, opa.json)", "≥ 2 × OPA REST", None)
else:
    o = level["opa_rest"]["decisions_per_second"]
    g = overall(c32)["per_second"]
    row("policy-decided, c=32, against OPA's REST server", f"{g / o:.2f} × OPA REST ({g:,.0f}/s against OPA's {o:,.0f}/s)", "≥ 2 × OPA REST", g / o >= 2)
ratio_row("plugin reviews, c=64", "plugin.json", 0.2)

msgs = load("messages.json")
if msgs is None:
    row("messages into the server per policy-decided proposal", "not measured (messages.json)", "≤ 6", None)
    row("server memory per stored decision (external server)", "not measured (messages.json)", "≤ 300 B, flat gated RSS", None)
else:
    m = msgs["in_msgs_per_proposal"]
    row("messages into the server per policy-decided proposal", f"{m:.1f} ({msgs['in_bytes_per_proposal']:,} bytes; {msgs['proposals']:,} proposals)", "≤ 6", m <= 6)
    b = msgs["server_mem_bytes_per_decision"]
    rss = [x for x in msgs["gated_rss_mb"] if x is not None]
    along = " → ".join(f"{x:.0f}" for x in rss) + " MB" if rss else "not read"
    # The server's resident set grows by its state and by the block
    # caches and collector's slack of a server taking writes; the state
    # alone is what a restart keeps (docs/NATS.md, Sizing the stored
    # decisions).
    row("server memory per stored decision (external server)",
        f"{b:,} B of resident growth while loaded (server {msgs['server_mem_mb_before']} → {msgs['server_mem_mb_after']} MB); gated RSS {along}",
        "≤ 300 B, flat gated RSS", b <= 300)

c1 = load("policy-c1.json")
if c1 is None:
    row("latency at c=1, policy path", "not measured (policy-c1.json)", "p50 ≤ 0.8 ms", None)
else:
    p50 = overall(c1)["p50_ms"]
    row("latency at c=1, policy path", f"p50 {p50:.2f} ms", "p50 ≤ 0.8 ms", p50 <= 0.8)

million = load("million.json")
if million is None:
    row("embedded default, 1M proposals decided", "not measured (make bench-million)", "≤ 512 MB", None)
else:
    proc = million.get("gated_process") or {}
    rss = proc.get("rss") or {}
    end = rss.get("end_mb")
    n = sum(s["answered"] for s in million["gated"] if s["path"] != "all")
    # The end is what the target names; the peak and the heap in use at
    # the middle say whether the collector's slack or the state made it.
    fig = "no RSS read"
    if end:
        fig = f"gated {end:,.0f} MB at the end of {n:,} (start {rss.get('start_mb', 0):,.0f}, middle {rss.get('middle_mb', 0):,.0f}"
        if proc.get("peak_rss_mb"):
            fig += f", peak with its plugins {proc['peak_rss_mb']:,.0f}"
        heap = (rss.get("middle_go") or {}).get("heap_in_use_bytes")
        if heap:
            fig += f"; heap in use at the middle {heap / 2**20:,.0f} MB"
        fig += ")"
    row("embedded default, 1M proposals decided", fig, "≤ 512 MB", None if end is None else end <= 512)

verify = load("verify.jsonl")
if not verify:
    row("gated audit verify", "not measured (verify.jsonl)", "≥ 200,000 records/s", None)
else:
    def med(mode, key):
        xs = [r[key] for r in verify if r["mode"] == mode]
        return statistics.median(xs) if xs else None
    full, chain = med("verdicts", "records_per_sec"), med("chain", "records_per_sec")
    fig = f"{full:,.0f} records/s" if full else "not measured"
    if chain:
        fig += f"; --skip-verdicts {chain:,.0f}/s"
    row("gated audit verify", fig, "≥ 200,000 records/s", None if full is None else full >= 200_000)

widths = [max(len(r[i]) for r in rows + [("measure", "figure", "target", "met")]) for i in range(4)]
def line(r):
    return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
print(line(("measure", "figure", "target", "met")))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in rows:
    print(line(r))
PY
