#!/usr/bin/env bash
# bench-clients: the fleet clients' policy-path round trip (c=1, publish →
# verdict, N proposals one after another) side by side against one gated
# serve: Go (internal/bench/roundtrip), Python (sdk/python/bench), and
# TypeScript (sdk/typescript/bench/roundtrip.mjs) when it is there. Each
# program prints one JSON line; the rounds alternate the languages, and the
# last lines give each language's p50 against Go's in the same round, and
# the median of those ratios over the rounds.
#
# Environment: N (default 2000), ROUNDS (default 4), GO, PYTHON (the
# interpreter with the gated package, default sdk/python/.venv/bin/python),
# GATED_BIN (default bin/gated).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
N=${N:-2000}
ROUNDS=${ROUNDS:-4}
PYTHON=${PYTHON:-sdk/python/.venv/bin/python}
GATED_BIN=${GATED_BIN:-bin/gated}

work=$(mktemp -d)
gated_pid=
cleanup() {
  if [ -n "$gated_pid" ]; then kill "$gated_pid" 2>/dev/null || true; wait "$gated_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nats_port=$(free_port)
http_port=$(free_port)
"$GO" build -o "$work/roundtrip" ./internal/bench/roundtrip
# The rounds send ROUNDS x N read proposals per language within minutes:
# far past the default budgets (600 reads a minute per agent), which would
# refuse them. Tenant acme's budgets are lifted, as gated-bench does for its
# own tenant.
unlimited='{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}'
printf 'tenants:\n  acme: {tenant: %s, agent: %s}\n' "$unlimited" "$unlimited" >"$work/budgets.yaml"
"$GATED_BIN" serve --data-dir "$work/data" --nats-listen "127.0.0.1:$nats_port" --http "127.0.0.1:$http_port" \
  --budgets "$work/budgets.yaml" --log-format json --log-level warn >"$work/gated.log" 2>&1 &
gated_pid=$!
for _ in $(seq 600); do
  if curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$gated_pid" 2>/dev/null; then cat "$work/gated.log"; echo "gated exited" >&2; exit 1; fi
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null

export GATED_NATS_URL="nats://127.0.0.1:$nats_port" TENANT=acme N
ts=sdk/typescript/bench/roundtrip.mjs
langs="go python"
if [ -f "$ts" ]; then
  if [ ! -d sdk/typescript/node_modules ]; then (cd sdk/typescript && npm ci --silent); fi
  langs="$langs typescript"
fi
echo "gated on $GATED_NATS_URL; N=$N per run, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  # Every other round runs the languages in reverse order, so that none
  # always runs first on a fresh gated.
  order=$langs
  if [ $((round % 2)) -eq 0 ]; then order=$(echo "$langs" | tr ' ' '\n' | tac | tr '\n' ' '); fi
  for lang in $order; do
    case $lang in
      go) "$work/roundtrip" ;;
      python) "$PYTHON" sdk/python/bench/roundtrip.py ;;
      typescript) node "$ts" ;;
    esac | tee -a "$work/results.jsonl"
  done
done
python3 - "$work/results.jsonl" "$langs" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
langs = sys.argv[2].split()
rounds = [rows[i : i + len(langs)] for i in range(0, len(rows), len(langs))]  # any order within a round
for lang in langs:
    mine = [r for rnd in rounds for r in rnd if r["lang"] == lang]
    ratios = [next(r for r in rnd if r["lang"] == lang)["p50_ms"] / next(r for r in rnd if r["lang"] == "go")["p50_ms"] for rnd in rounds]
    p50 = statistics.median(r["p50_ms"] for r in mine)
    p99 = statistics.median(r["p99_ms"] for r in mine)
    rate = statistics.median(r["per_sec"] for r in mine)
    print(f"{lang:10} median of {len(mine)} runs: p50 {p50:.3f} ms  p99 {p99:.3f} ms  {rate:.0f}/s;"
          f"  p50 / Go's p50 by round: {' '.join(f'{x:.2f}' for x in ratios)} (median {statistics.median(ratios):.2f}x)")
PY
