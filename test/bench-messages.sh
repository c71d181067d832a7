#!/usr/bin/env bash
# bench-messages: what a policy-decided proposal costs the NATS server.
# Builds nats-server at the version go.mod pins, starts it with JetStream
# and its monitoring port, starts a gated serve on it (the bench tenant's
# budgets lifted, as gated-bench lifts them), and sends N policy-decided
# proposals with gated-bench --nats-url, no warm-up and no floor. The
# server's /varz before and after gives the messages and bytes sent into
# the server per proposal (in_msgs, in_bytes: the clients' publishes and
# requests, gated's and gated-bench's) and its resident memory per
# decision stored (mem); gated-bench reports gated's RSS along the run.
# Prints one JSON line.
#
# Environment: N (default 100000), C (default 64), GATED_BIN (default
# bin/gated), BENCH_BIN (default bin/gated-bench), JSON (a file to write
# the line to).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
C=${C:-64}
GATED_BIN=${GATED_BIN:-bin/gated}
BENCH_BIN=${BENCH_BIN:-bin/gated-bench}
JSON=${JSON:-}

work=$(mktemp -d)
nats_pid=
gated_pid=
cleanup() {
  for p in $gated_pid $nats_pid; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/nats-server" github.com/nats-io/nats-server/v2
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nats_port=$(free_port)
mon_port=$(free_port)
http_port=$(free_port)
"$work/nats-server" -js -sd "$work/js" -a 127.0.0.1 -p "$nats_port" -m "$mon_port" >"$work/nats.log" 2>&1 &
nats_pid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$mon_port/varz" >/dev/null 2>&1 && break; sleep 0.1; done

mkdir -p "$work/data"
printf 'tenants:\n  bench: {tenant: %s, agent: %s}\n' \
  '{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}' \
  '{proposals: unlimited, reads: unlimited, tokens: unlimited, reviews_in_flight: unlimited, holds_pending: unlimited}' >"$work/budgets.yaml"
"$GATED_BIN" serve --nats-url "nats://127.0.0.1:$nats_port" --data-dir "$work/data" --http "127.0.0.1:$http_port" \
  --budgets "$work/budgets.yaml" --log-format json --log-level warn >"$work/gated.log" 2>&1 &
gated_pid=$!
for _ in $(seq 1200); do
  if curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$gated_pid" 2>/dev/null; then cat "$work/gated.log" >&2; echo "bench-messages: gated serve exited" >&2; exit 1; fi
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null

curl -fsS "http://127.0.0.1:$mon_port/varz" >"$work/before.json"
"$BENCH_BIN" --nats-url "nats://127.0.0.1:$nats_port" --pid "$gated_pid" -n "$N" --mix denied=1,read=1 -c "$C" \
  --warmup 0 --floor=false --progress off --json "$work/bench.json" >"$work/bench.txt" 2>"$work/bench.err" ||
  { cat "$work/bench.txt" "$work/bench.err" >&2; exit 1; }
curl -fsS "http://127.0.0.1:$mon_port/varz" >"$work/after.json"

python3 - "$work/before.json" "$work/after.json" "$work/bench.json" "$N" "$C" <<'PY' | tee "$work/row.json"
import json, sys
before, after, bench = (json.load(open(p)) for p in sys.argv[1:4])
n, c = int(sys.argv[4]), int(sys.argv[5])
answered = sum(s["answered"] for s in bench["gated"] if s["path"] != "all") or n
proc = bench.get("gated_process") or {}
rss = proc.get("rss") or {}
row = {
    "proposals": answered, "concurrency": c,
    "per_second": round(next((s["per_second"] for s in bench["gated"] if s["path"] == "all"), bench["gated"][0]["per_second"])),
    "in_msgs_per_proposal": round((after["in_msgs"] - before["in_msgs"]) / answered, 2),
    "in_bytes_per_proposal": round((after["in_bytes"] - before["in_bytes"]) / answered),
    "server_mem_mb_before": round(before["mem"] / 2**20), "server_mem_mb_after": round(after["mem"] / 2**20),
    "server_mem_bytes_per_decision": round((after["mem"] - before["mem"]) / answered),
    "gated_rss_mb": [rss.get("start_mb"), rss.get("middle_mb"), rss.get("end_mb")],
}
print(json.dumps(row))
PY
if [ -n "$JSON" ]; then cp "$work/row.json" "$JSON"; fi
