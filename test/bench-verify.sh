#!/usr/bin/env bash
# bench-verify: `gated audit verify` against a store holding the histories
# of PREFILL policy-decided proposals. gated-bench fills an embedded gated's
# store (--prefill, --keep) and measures the policy path on it; a gated
# serve is then started on the kept files, idle, and verify reads the whole
# audit stream from it with the store's audit key, with the stored verdicts'
# check and without it (--skip-verdicts), ROUNDS times each, alternating.
# Each run prints records/s, the verify process's CPU and its peak RSS, and
# the last lines the median of each.
#
# Environment: PREFILL (default 1000000), ROUNDS (default 2), GATED_BIN
# (default bin/gated), BENCH_BIN (default bin/gated-bench; it starts
# GATED_BIN), JSON (a file to write the runs to as JSON lines).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFILL=${PREFILL:-1000000}
ROUNDS=${ROUNDS:-2}
GATED_BIN=${GATED_BIN:-bin/gated}
BENCH_BIN=${BENCH_BIN:-bin/gated-bench}
JSON=${JSON:-}

work=$(mktemp -d)
kept=
gated_pid=
cleanup() {
  if [ -n "$gated_pid" ]; then kill "$gated_pid" 2>/dev/null || true; wait "$gated_pid" 2>/dev/null || true; fi
  if [ -n "$kept" ]; then rm -rf "$kept"; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "filling a store with the histories of $PREFILL proposals (gated-bench --prefill $PREFILL --keep)"
"$BENCH_BIN" --gated "$GATED_BIN" -n 2000 --mix denied=1,read=1 -c 64 --floor=false --progress off \
  --prefill "$PREFILL" --keep >"$work/bench.txt" 2>"$work/bench.err" || { cat "$work/bench.err" >&2; exit 1; }
kept=$(sed -n "s/^the embedded gated's files stay in //p" "$work/bench.err")
if [ -z "$kept" ] || [ ! -d "$kept/data" ]; then
  cat "$work/bench.err" >&2
  echo "bench-verify: gated-bench did not say where it kept its files" >&2
  exit 1
fi
grep -i "prefill" "$work/bench.txt" || true

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
nats_port=$(free_port)
http_port=$(free_port)
"$GATED_BIN" serve --data-dir "$kept/data" --nats-listen "127.0.0.1:$nats_port" --http "127.0.0.1:$http_port" \
  --log-format json --log-level warn >"$work/gated.log" 2>&1 &
gated_pid=$!
for _ in $(seq 1200); do
  if curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$gated_pid" 2>/dev/null; then cat "$work/gated.log" >&2; echo "bench-verify: gated serve exited" >&2; exit 1; fi
  sleep 0.1
done
curl -fsS "http://127.0.0.1:$http_port/readyz" >/dev/null

# run MODE [flags]: one verify, timed by /usr/bin/time; prints one JSON line.
run() {
  local mode=$1
  shift
  local status=0
  /usr/bin/time -f '%e %U %S %M' -o "$work/time" \
    "$GATED_BIN" audit verify --nats-url "nats://127.0.0.1:$nats_port" --audit-key-file "$kept/data/audit.key" "$@" \
    >"$work/verify.out" 2>"$work/verify.err" || status=$?
  if [ "$status" -ne 0 ]; then
    cat "$work/verify.out" "$work/verify.err" >&2
    echo "bench-verify: verify exited $status" >&2
    exit 1
  fi
  python3 - "$mode" "$work/time" "$work/verify.out" <<'PY'
import json, re, sys
mode, timef, outf = sys.argv[1:]
elapsed, user, system, max_kb = open(timef).read().split()[-4:]
out = open(outf).read()
m = re.search(r"^(\d+) messages \(seq \d+-\d+\), (\d+) records", out, re.M)
if not m:
    sys.exit("bench-verify: no count of records in verify's output:\n" + out)
records, elapsed = int(m.group(2)), float(elapsed)
cpu = float(user) + float(system)
row = {"mode": mode, "records": records, "seconds": elapsed, "records_per_sec": round(records / elapsed),
       "cpu_seconds": round(cpu, 2), "cpu_us_per_record": round(cpu / records * 1e6, 1), "peak_rss_mb": round(int(max_kb) / 1024)}
v = re.search(r"^(\d+) stored verdicts checked", out, re.M)
if v:
    row["verdicts"] = int(v.group(1))
print(json.dumps(row))
PY
}

for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then
    run verdicts | tee -a "$work/runs.jsonl"
    run chain --skip-verdicts | tee -a "$work/runs.jsonl"
  else
    run chain --skip-verdicts | tee -a "$work/runs.jsonl"
    run verdicts | tee -a "$work/runs.jsonl"
  fi
done
if [ -n "$JSON" ]; then cp "$work/runs.jsonl" "$JSON"; fi
python3 - "$work/runs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for mode, what in (("verdicts", "with the verdict check"), ("chain", "--skip-verdicts")):
    mine = [r for r in rows if r["mode"] == mode]
    med = lambda k: statistics.median(r[k] for r in mine)
    print(f"verify {what:24} median of {len(mine)}: {med('records_per_sec'):,.0f} records/s, "
          f"{med('cpu_us_per_record'):.1f} µs CPU a record, peak RSS {med('peak_rss_mb'):.0f} MB ({mine[0]['records']:,} records)")
PY
