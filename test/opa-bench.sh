#!/usr/bin/env bash
# opa-bench.sh: gated's policy path against stock OPA's REST API, side by side.
#
# Builds `opa` from the OPA module version go.mod pins (through the Go
# module proxy and cache, never vendored), serves gated's default bundle
# with `opa run --server` on a free local port, and runs test/opabench at
# equal client concurrency: POSTs to /v1/data/gated/decision against the
# policy gated serves, called in process, on the same inputs. It then
# measures the same proposal mix end to end with gated-bench, through an
# embedded gated.
#
# Environment (all optional):
#   OPA_BENCH_C       client concurrency, or a comma-separated list (default 32)
#   OPA_BENCH_N       decisions per mode and concurrency (default 20000)
#   OPA_BENCH_WARMUP  decisions discarded before each measurement (default 2000)
#   OPA_BENCH_CHECK   decisions compared between OPA and gated first (default 200)
#   OPA_BENCH_JSON    write the driver's results as JSON to this file
#   OPA_BENCH_E2E     0 skips the end-to-end gated-bench run (default 1)
set -euo pipefail

cd "$(dirname "$0")/.."

c=${OPA_BENCH_C:-32}
n=${OPA_BENCH_N:-20000}
warmup=${OPA_BENCH_WARMUP:-2000}
check=${OPA_BENCH_CHECK:-200}
json=${OPA_BENCH_JSON:-}
e2e=${OPA_BENCH_E2E:-1}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/opa-bench.XXXXXX")
opa_pid=
cleanup() {
	if [[ -n $opa_pid ]]; then
		kill "$opa_pid" 2>/dev/null || true
		wait "$opa_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

opa_version=$(go list -m -f '{{.Version}}' github.com/open-policy-agent/opa)
echo "== building opa $opa_version (the version go.mod pins)"
go build -o "$tmp/opa" github.com/open-policy-agent/opa
go build -o "$tmp/opabench" ./test/opabench

# The default bundle as gated embeds it: the modules without their tests,
# and data.json, which OPA places at the data root as gated does.
bundle=()
for f in policies/*.rego; do
	[[ $f == *_test.rego ]] || bundle+=("$f")
done
bundle+=(policies/data.json)

# port_free succeeds when nothing listens on 127.0.0.1:$1.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# healthy succeeds when GET /health on 127.0.0.1:$1 answers 200.
healthy() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
		read -r _ status _ <&3
		[[ $status == 200 ]]
	) 2>/dev/null
}

# start_opa starts OPA on a free port and waits for /health; it retries
# with another port if one is taken between the check and the bind.
start_opa() {
	local attempt port
	for attempt in 1 2 3 4 5; do
		port=$((20000 + RANDOM % 40000))
		port_free "$port" || continue
		"$tmp/opa" run --server --addr "127.0.0.1:$port" --log-level error \
			--skip-version-check "${bundle[@]}" >"$tmp/opa.log" 2>&1 &
		opa_pid=$!
		local i
		for i in $(seq 100); do
			if ! kill -0 "$opa_pid" 2>/dev/null; then
				break
			fi
			if healthy "$port"; then
				opa_url="http://127.0.0.1:$port"
				return 0
			fi
			sleep 0.1
		done
		kill "$opa_pid" 2>/dev/null || true
		wait "$opa_pid" 2>/dev/null || true
		opa_pid=
		echo "opa did not come up on port $port (attempt $attempt):" >&2
		cat "$tmp/opa.log" >&2
	done
	echo "giving up: opa run --server would not start" >&2
	return 1
}

echo "== starting opa run --server with ${bundle[*]}"
start_opa
echo "   serving at $opa_url (pid $opa_pid)"

echo "== gated in process against OPA REST, c=$c"
args=(-opa "$opa_url" -opa-pid "$opa_pid" -c "$c" -n "$n" -warmup "$warmup" -check "$check")
if [[ -n $json ]]; then
	args+=(-json "$json")
fi
"$tmp/opabench" "${args[@]}"

if [[ $e2e == 0 ]]; then
	exit 0
fi
echo
# gated-bench starts the gated built next to it.
go build -o "$tmp/gated" ./cmd/gated
go build -o "$tmp/gated-bench" ./cmd/gated-bench
# Policy-decided proposals end to end (NATS, decode, policy, verdict,
# audit) at the same client concurrency, for scale.
for level in ${c//,/ }; do
	echo "== gated end to end: gated-bench --mix denied=1,read=1 -n $n -c $level"
	"$tmp/gated-bench" --mix denied=1,read=1 -n "$n" -c "$level" --progress off
done
