# gated: build, test and code generation.
GO ?= go

# The Python SDK's tests run in a virtual environment of their own.
PYTHON ?= python3
PY_VENV := sdk/python/.venv

.PHONY: test-mcp-conformance
.PHONY: all build run check check-go check-python check-ts test test-go test-python test-python-crewai test-ts test-mcp-ts test-browser console-js console-screenshots bench-clients bench-mcp bench-plugin-python vet fmt proto proto-python folding fuzz mutants bench bench-history bench-scaleout bench-policy bench-plugins bench-audit bench-replay bench-verify bench-verify-cli bench-opa bench-summary bench-messages bench-million opa-test clean

all: build

# gated --version names the release tag and the revision of the checkout
# it was built from (cmd/gated/version.go); "dev" between releases.
GATED_VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo dev)
GATED_REVISION ?= $(shell r=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- || r=$$r-modified; } && echo $$r)
GATED_LDFLAGS = -X main.version=$(GATED_VERSION) -X main.revision=$(GATED_REVISION)

build:
	$(GO) build -ldflags "$(GATED_LDFLAGS)" -o bin/gated ./cmd/gated
	$(GO) build -o bin/gated-bench ./cmd/gated-bench
	$(GO) build -o bin/mcp-ops ./examples/mcp-ops

# run starts gated with an embedded NATS server and the default bundle.
# The first build on a machine takes minutes before gated prints a line:
# it says so first.
run:
	@echo "make run: building gated, then starting it; the first build on this machine downloads and compiles its modules, which takes a few minutes"
	$(GO) run -ldflags "$(GATED_LDFLAGS)" ./cmd/gated serve

# test is what CI runs (.ci/run calls it).
test: test-go test-python test-python-crewai test-ts test-mcp-ts test-browser test-mcp-conformance

# check is the inner loop: go vet, gofmt, and the unit tests of every
# language, without the race detector, the end-to-end suites (test/, the
# clients' tests against a real gated serve) or the tests that honour
# -short by skipping. make test runs all of it, and more. Its go test
# runs with -vet=off: go vet has checked every package just before.
check: check-go check-python check-ts

GO_UNIT_PKGS = $$($(GO) list ./... | grep -v -e '/test$$' -e '/test/')

check-go:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); exit 1; }
	$(GO) test -short -count=1 -vet=off $(GO_UNIT_PKGS)

check-python: $(PY_VENV)/.installed
	cd sdk/python && .venv/bin/mypy
	cd sdk/python && .venv/bin/pytest -q -p no:cacheprovider --ignore-glob='*_e2e.py' \
	  --ignore=tests/plugin/test_through_gated.py --ignore=tests/plugin/test_example.py

check-ts:
	@test -d sdk/typescript/node_modules || { cd sdk/typescript && npm ci --no-audit --no-fund; }
	cd sdk/typescript && node --test --test-concurrency=1 $$(ls test/*.test.mjs | grep -v '\.e2e\.')

# test-go vets, checks the formatting of and tests the Go module.
test-go:
	$(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$'); exit 1; }
	$(GO) test -race -count=1 -timeout 30m ./...

# test-ts installs the TypeScript client's pinned dependencies (npm ci)
# and rebuilds its dist/, fails when the committed dist/ differs from that
# build, and runs its tests (among them the install of its packed tarball
# into a fresh project) and the TypeScript fleet example's against a real
# gated serve built here. Then the framework integrations: their tests
# (sdk/typescript/test/integrations: the Vercel AI SDK, OpenAI Agents JS
# and LangGraph.js at pinned versions, the client installed from its
# tarball) and the examples ai-ts, openai-agents-ts and langgraph-ts.
test-ts: build
	cd sdk/typescript && npm ci --no-audit --no-fund && npm run build
	@test -z "$$(git status --porcelain -- sdk/typescript/dist)" || { echo "sdk/typescript/dist is stale: commit the output of npm run build"; git status --short -- sdk/typescript/dist; exit 1; }
	cd sdk/typescript && GATED_BIN="$(CURDIR)/bin/gated" npm test
	cd examples/fleet-ts && npm ci --no-audit --no-fund && GATED_BIN="$(CURDIR)/bin/gated" npm test
	cd sdk/typescript/test/integrations && npm ci --no-audit --no-fund --prefer-offline && GATED_BIN="$(CURDIR)/bin/gated" npm test
	for ex in ai-ts openai-agents-ts langgraph-ts; do \
	  (cd examples/$$ex && npm ci --no-audit --no-fund --prefer-offline && GATED_BIN="$(CURDIR)/bin/gated" npm test) || exit 1; \
	done

# test-mcp-ts runs gated mcp under the TypeScript MCP SDK's client
# (test/mcp-ts, its pinned @modelcontextprotocol/sdk): over stdio and
# streamable HTTP, in front of examples/mcp-ops, with a real gated serve
# built here. The tests are TypeScript (strict), compiled by npm test.
test-mcp-ts: build
	cd test/mcp-ts && npm ci --no-audit --no-fund
	cd test/mcp-ts && GATED_BIN="$(CURDIR)/bin/gated" MCP_OPS_BIN="$(CURDIR)/bin/mcp-ops" npm test

# test-mcp-conformance runs the MCP conformance suite's server scenarios
# (test/mcp-conformance: @modelcontextprotocol/conformance pinned, and the
# Node 22 it needs from the npm package node) against the conformance
# upstream (test/mcp-conformance/upstream) directly, and through gated mcp
# in front of it over streamable HTTP and over stdio, with a real gated
# serve: every check that passes directly passes through gated
# (cmd/gated TestMCPConformance).
test-mcp-conformance:
	cd test/mcp-conformance && npm ci --no-audit --no-fund
	GATED_MCP_CONFORMANCE_DIR="$(CURDIR)/test/mcp-conformance" $(GO) test -count=1 -run '^TestMCPConformance$$' ./cmd/gated

# test-browser type-checks the web console's scripts (console-js) and runs
# the console's tests in Debian's headless Chromium (console/browser_test.go,
# build tag browser): the pages load without console errors, a new verdict
# shows live, an operator approves a held verdict, forged and wrongly scoped
# decisions are refused, tenants are kept apart. Without Chromium it fails;
# .ci/run installs it.
CHROMIUM ?= chromium
test-browser: console-js
	@command -v $(CHROMIUM) >/dev/null 2>&1 || { echo "test-browser needs Chromium ($(CHROMIUM) is not on PATH): apt-get install chromium, or set CHROMIUM to the browser"; exit 1; }
	$(GO) vet -tags browser ./console
	GATED_CHROMIUM="$$(command -v $(CHROMIUM))" $(GO) test -tags browser -race -count=1 -run '^TestConsoleInBrowser$$' ./console

# console-js checks console/assets/*.js (plain ES modules with JSDoc types)
# with tsc --noEmit, the compiler the TypeScript client pins.
console-js:
	@test -x sdk/typescript/node_modules/.bin/tsc || { cd sdk/typescript && npm ci --no-audit --no-fund; }
	sdk/typescript/node_modules/.bin/tsc -p console/tsconfig.json

# console-screenshots remakes the screenshots of docs/CONSOLE.md
# (docs/console/*.png) from the browser test.
console-screenshots:
	@command -v $(CHROMIUM) >/dev/null 2>&1 || { echo "console-screenshots needs Chromium: apt-get install chromium"; exit 1; }
	mkdir -p docs/console
	GATED_CHROMIUM="$$(command -v $(CHROMIUM))" GATED_CONSOLE_SCREENSHOTS="$(CURDIR)/docs/console" \
	  $(GO) test -tags browser -count=1 -run '^TestConsoleInBrowser$$' ./console

# test-python runs the Python SDK's tests (sdk/python/tests) after mypy
# --strict on the package: the shared vectors, hypothesis fuzzing, the
# client, the tool gate and the examples against a real gated serve built
# here, and reviewer plugins in Python under that gated's real host. The virtual environment
# is made on first use and remade when pyproject.toml changes.
$(PY_VENV)/.installed: sdk/python/pyproject.toml
	$(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/python -m pip install -q --upgrade pip
	$(PY_VENV)/bin/python -m pip install -q -e 'sdk/python[test]'
	touch $@

test-python: build $(PY_VENV)/.installed
	cd sdk/python && .venv/bin/mypy
	cd sdk/python && GATED_BIN=$(CURDIR)/bin/gated .venv/bin/pytest -q -p no:cacheprovider \
	  --ignore=tests/integrations/test_crewai_e2e.py

# test-python-crewai runs the CrewAI integration's tests against a real
# gated serve in a virtual environment of their own (sdk/python/.venv-crewai,
# the package's test-crewai extra): CrewAI pins versions of openai and mcp
# that the other frameworks and the MCP tests cannot share.
PY_VENV_CREWAI := sdk/python/.venv-crewai

$(PY_VENV_CREWAI)/.installed: sdk/python/pyproject.toml
	$(PYTHON) -m venv $(PY_VENV_CREWAI)
	$(PY_VENV_CREWAI)/bin/python -m pip install -q --upgrade pip
	$(PY_VENV_CREWAI)/bin/python -m pip install -q -e 'sdk/python[test-crewai]'
	touch $@

test-python-crewai: build $(PY_VENV_CREWAI)/.installed
	cd sdk/python && CREWAI_DISABLE_TELEMETRY=true OTEL_SDK_DISABLED=true GATED_BIN=$(CURDIR)/bin/gated \
	  .venv-crewai/bin/pytest -q -p no:cacheprovider -W ignore::DeprecationWarning tests/integrations/test_crewai_e2e.py

# mutants takes each hard rule out of a copy of the source in turn (the
# policy's refusals, the reviewer tool bag, the decision line, required
# gates, mutual TLS to plugins) and fails unless some test catches every
# one (test/mutants.sh). Too slow for test: it runs on demand.
mutants:
	GO="$(GO)" bash test/mutants.sh

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

# proto regenerates plugins/pluginv1 from plugins/proto. It needs protoc
# (Debian: protobuf-compiler); the Go generators are pinned tools in go.mod.
proto:
	protoc --plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" \
	       --plugin=protoc-gen-go-grpc="$$($(GO) tool -n protoc-gen-go-grpc)" \
	       -I plugins/proto \
	       --go_out=. --go_opt=module=github.com/gated/gated \
	       --go-grpc_out=. --go-grpc_opt=module=github.com/gated/gated \
	       plugins/proto/gated/plugin/v1/reviewer.proto

# proto-python regenerates the Python SDK's protocol code
# (sdk/python/gated/plugin/v1 and .../goplugin) from plugins/proto, with
# the grpcio-tools pinned in the package's test dependencies.
proto-python: $(PY_VENV)/.installed
	$(PY_VENV)/bin/python -m grpc_tools.protoc -I plugins/proto \
	       --python_out=sdk/python --pyi_out=sdk/python --grpc_python_out=sdk/python \
	       plugins/proto/gated/plugin/v1/reviewer.proto plugins/proto/gated/plugin/goplugin/goplugin.proto

# folding rewrites test/vectors/folding.json from Go's unicode tables, and
# from it the Python SDK's table of them (sdk/python/gated/_orbits.py) and
# the TypeScript client's (sdk/typescript/src/foldtable.ts, then its dist/).
folding:
	$(GO) test ./internal/strictjson -run TestFoldingVectors -update
	$(PYTHON) sdk/python/tests/gen_orbits.py
	node sdk/typescript/scripts/fold-table.mjs
	cd sdk/typescript && npm run build

# bench-plugin-python measures a review through a Python reviewer plugin
# (sdk/python/tests/plugin/bench_plugin.py) beside the Go sop reviewer, in
# one run: the cases of bench-plugins, the Python ones under python/.
bench-plugin-python: $(PY_VENV)/.installed
	PATH="$(CURDIR)/$(PY_VENV)/bin:$$PATH" GATED_BENCH_PYTHON_PLUGIN="$(CURDIR)/sdk/python/tests/plugin/bench_plugin.py" \
	  $(GO) test ./plugins -run '^$$' -bench '^BenchmarkReviewRoundTrip$$' -benchtime 3000x -count 3

# fuzz runs every fuzz target for FUZZTIME each.
FUZZTIME ?= 20s
fuzz:
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzDecodeProposal$$' -fuzztime $(FUZZTIME)
	$(GO) test . -run '^$$' -fuzz '^FuzzDecodeFast$$' -fuzztime $(FUZZTIME)
	$(GO) test . -run '^$$' -fuzz '^FuzzPolicyDecidedJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test . -run '^$$' -fuzz '^FuzzDecodeLocalBatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jsonw -run '^$$' -fuzz '^FuzzSetTopLevelUint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/bench -run '^$$' -fuzz '^FuzzParsePSS$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/bench -run '^$$' -fuzz '^FuzzParseGoRuntime$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzDecodeStatus$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzDecodeExecutionReport$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/grants -run '^$$' -fuzz '^FuzzDecodeGrantUse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/grants -run '^$$' -fuzz '^FuzzGrantSubjects$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/fleet -run '^$$' -fuzz '^FuzzDecodeGrantUseReply$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/strictjson -run '^$$' -fuzz '^FuzzCheckKeys$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzParseDecision$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzCheckGateLines$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzRecoverAddress$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzParseProposalSubject$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine -run '^$$' -fuzz '^FuzzDecideWithPolicy$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies -run '^$$' -fuzz '^FuzzParseDataJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies -run '^$$' -fuzz '^FuzzParseDataYAML$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies/internal/plan -run '^$$' -fuzz '^FuzzPlannedAgreesWithTopdown$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies/internal/plan -run '^$$' -fuzz '^FuzzPlanOnTestInputs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies/internal/plan -run '^$$' -fuzz '^FuzzGlobMatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies -run '^$$' -fuzz '^FuzzMatchActionAgreesWithPolicy$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/fleet -run '^$$' -fuzz '^FuzzAddressOf$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/fleet -run '^$$' -fuzz '^FuzzDecodeReviewReply$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies -run '^$$' -fuzz '^FuzzActionPatternValidityAgreesWithGo$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/store -run '^$$' -fuzz '^FuzzStoredRecords$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/fleet -run '^$$' -fuzz '^FuzzDecodeStoredVerdict$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzDuplicateMember$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jsonw -run '^$$' -fuzz '^FuzzAppendString$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzDecodeCanonical$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jsonscan -run '^$$' -fuzz '^FuzzValue$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/jsonscan -run '^$$' -fuzz '^FuzzSkip$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzQuickPrint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzParseHeads$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzDecodeBucketVerdict$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzTrackRecord$$' -fuzztime $(FUZZTIME)
	# evidence bundles (docs/AUDIT.md#evidence)
	$(GO) test ./bus/evidence -run '^$$' -fuzz '^FuzzRecordLine$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/evidence -run '^$$' -fuzz '^FuzzVerifyBundle$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s
	$(GO) test ./bus/evidence -run '^$$' -fuzz '^FuzzParseCheckpoint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/evidence -run '^$$' -fuzz '^FuzzParseKeys$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzMayTrack$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzRecordJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzNormalizeData$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzAppendEvent$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzDecodeShadowDiffers$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus -run '^$$' -fuzz '^FuzzParseLockHolder$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/fleet -run '^$$' -fuzz '^FuzzDecodeContinuation$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/fleet -run '^$$' -fuzz '^FuzzDecodeEscalation$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/operator -run '^$$' -fuzz '^FuzzDecodeMessage$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/operator -run '^$$' -fuzz '^FuzzDecodeClear$$' -fuzztime $(FUZZTIME)
	$(GO) test ./policies -run '^$$' -fuzz '^FuzzParseHolds$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/intake -run '^$$' -fuzz '^FuzzHoldTokens$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/digest -run '^$$' -fuzz '^FuzzValidSHA256$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine/grant -run '^$$' -fuzz '^FuzzCanonicalize$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine/grant -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime $(FUZZTIME)
	$(GO) test ./engine/grant -run '^$$' -fuzz '^FuzzParseKeySet$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/strictjson -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/strictjson -run '^$$' -fuzz '^FuzzPosition$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/strictjson -run '^$$' -fuzz '^FuzzObject$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/strictjson -run '^$$' -fuzz '^FuzzReadValue$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/yamlpos -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/operator -run '^$$' -fuzz '^FuzzParseList$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/notify -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/budget -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/budget -run '^$$' -fuzz '^FuzzDecodeCounters$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/budget -run '^$$' -fuzz '^FuzzDecodeLease$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/budget -run '^$$' -fuzz '^FuzzRateJSON$$' -fuzztime $(FUZZTIME)
	$(GO) test ./personas -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins -run '^$$' -fuzz '^FuzzCallTool$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/llm -run '^$$' -fuzz '^FuzzParseAnswer$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/sdk -run '^$$' -fuzz '^FuzzRunFromWire$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins -run '^$$' -fuzz '^FuzzDecodeLock$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/server -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cmd/gated -run '^$$' -fuzz '^FuzzParseSince$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/bench -run '^$$' -fuzz '^FuzzParseMix$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/bench -run '^$$' -fuzz '^FuzzParseProcStat$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/bench -run '^$$' -fuzz '^FuzzParseSizes$$' -fuzztime $(FUZZTIME)
	$(GO) test ./console -run '^$$' -fuzz '^FuzzDecodeSignIn$$' -fuzztime $(FUZZTIME)
	$(GO) test ./console -run '^$$' -fuzz '^FuzzDecodeDecision$$' -fuzztime $(FUZZTIME)
	$(GO) test ./console -run '^$$' -fuzz '^FuzzParseWindow$$' -fuzztime $(FUZZTIME)
	$(GO) test ./mcpgate -run '^$$' -fuzz '^FuzzDecodeCatalog$$' -fuzztime $(FUZZTIME)
	$(GO) test ./mcpgate -run '^$$' -fuzz '^FuzzMappingRead$$' -fuzztime $(FUZZTIME)
	$(GO) test ./mcpgate -run '^$$' -fuzz '^FuzzDecodeLine$$' -fuzztime $(FUZZTIME)
	$(GO) test ./mcpgate -run '^$$' -fuzz '^FuzzRelayReadCall$$' -fuzztime $(FUZZTIME)
	$(GO) test ./mcpgate -run '^$$' -fuzz '^FuzzTapBody$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/telemetry -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/tracectx -run '^$$' -fuzz '^FuzzExtract$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzDecodeLegacyV2$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzGIDPrint$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/audit -run '^$$' -fuzz '^FuzzScanV3$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/notify -run '^$$' -fuzz '^FuzzClassify$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/replay -run '^$$' -fuzz '^FuzzDecodeRecordedPolicy$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/replay -run '^$$' -fuzz '^FuzzReplayRecords$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/replay -run '^$$' -fuzz '^FuzzReviewRecords$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/reviewtext -run '^$$' -fuzz '^FuzzFold$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/reviewtext -run '^$$' -fuzz '^FuzzSelfReported$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/strictjson -run '^$$' -fuzz '^FuzzCheckFolded$$' -fuzztime $(FUZZTIME)
	$(GO) test ./deploy/image -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME)
	$(GO) test ./deploy/image -run '^$$' -fuzz '^FuzzExtract$$' -fuzztime $(FUZZTIME)
	$(GO) test ./bus/flow -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins -run '^$$' -fuzz '^FuzzStderrTail$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/natsconn -run '^$$' -fuzz '^FuzzCheckURL$$' -fuzztime $(FUZZTIME)

# bench runs the whole benchmark of docs/BENCHMARKS.md: gated-bench on
# the policy paths at high and low concurrency, the plugin path (each
# against the bare JetStream floor in the same run), the llm path as one
# burst and sustained, each with a probe, OPA side by side, and
# the Go benchmarks of the policy, the plugin round trip and the audit
# trail; what a proposal costs an external NATS server, and gated audit
# verify. Reports go to bench-results/; it ends with bench-summary, the
# figures of the targets, each with its target. make bench-million, which
# takes long, adds the last one.
BENCH_N ?= 100000
bench: build
	mkdir -p bench-results
	./bin/gated-bench -n $(BENCH_N) --mix denied=1,read=1 -c 256 --json bench-results/policy.json
	./bin/gated-bench -n $(BENCH_N) --mix denied=1,read=1 -c 256 --serve-arg=--shadow-policies=examples/policies --json bench-results/policy-shadow.json
	./bin/gated-bench -n $$(( $(BENCH_N) / 50 )) --mix denied=1,read=1 -c 1 --json bench-results/policy-c1.json
	./bin/gated-bench -n $$(( $(BENCH_N) / 25 )) --mix denied=1,read=1 -c 2 --json bench-results/policy-c2.json
	./bin/gated-bench -n $$(( $(BENCH_N) / 10 )) --mix denied=1,read=1 -c 8 --json bench-results/policy-c8.json
	./bin/gated-bench -n $$(( $(BENCH_N) / 5 )) --mix denied=1,read=1 -c 32 --json bench-results/policy-c32.json
	./bin/gated-bench -n $$(( $(BENCH_N) / 4 )) --mix plugin=1 -c 64 --json bench-results/plugin.json
	./bin/gated-bench -n 2000 --mix llm=1 -c 2000 --llm-latency 2s --probe-rate 500 --floor=false --json bench-results/llm-burst.json
	./bin/gated-bench -n 40000 --mix llm=1 -c 2000 --ramp 2s --llm-latency 2s --probe-rate 500 --floor=false --json bench-results/llm.json
	bash -o pipefail -c 'OPA_BENCH_E2E=0 OPA_BENCH_JSON=bench-results/opa.json bash test/opa-bench.sh | tee bench-results/opa.txt'
	bash -o pipefail -c '$(MAKE) --no-print-directory bench-policy bench-plugins bench-audit bench-replay | tee bench-results/go-bench.txt'
	bash -o pipefail -c '$(MAKE) --no-print-directory bench-plugin-python | tee bench-results/plugin-python.txt'
	bash -o pipefail -c '$(MAKE) --no-print-directory bench-clients | tee bench-results/clients.txt'
	bash -o pipefail -c '$(MAKE) --no-print-directory bench-mcp | tee bench-results/mcp.txt'
	$(MAKE) --no-print-directory bench-history bench-scaleout bench-messages bench-verify-cli bench-summary

# bench-summary prints the figures of the last make bench (bench-results/)
# against their targets: the policy path at c=256 and c=32 and the plugin
# path at c=64 as × floor, the policy path at c=32 against OPA's REST
# server, messages into the server per proposal and its memory per stored
# decision (bench-messages), latency at c=1, gated's RSS after a million
# decided (bench-million) and gated audit verify's records/s
# (test/bench-summary.sh). It also writes bench-results/summary.txt.
bench-summary:
	bash -o pipefail -c 'bash test/bench-summary.sh bench-results | tee bench-results/summary.txt'

# bench-messages counts, at an external nats-server (its /varz), the
# messages and bytes a policy-decided proposal sends into the server and
# the server's memory per decision stored, MESSAGES_N proposals at c=64
# (test/bench-messages.sh).
MESSAGES_N ?= 100000
bench-messages: build
	mkdir -p bench-results
	N=$(MESSAGES_N) JSON=bench-results/messages.json bash test/bench-messages.sh

# bench-million decides a million policy-decided proposals on the embedded
# default (the bench tenant's budgets lifted, no floor) and reports
# gated's RSS along the run, the figure of the embedded default's target;
# bench-summary reads it. It takes about as long as a million proposals
# at the policy path's rate (minutes), so make bench does not run it.
bench-million: build
	mkdir -p bench-results
	./bin/gated-bench -n 1000000 --mix denied=1,read=1 -c 256 --floor=false --progress off --json bench-results/million.json

# bench-mcp measures gated mcp (docs/MCP.md): a read call through the
# proxy against the same call made directly to examples/mcp-ops and
# through a bare proxy of the MCP Go SDK alone, and a policy-decided call
# through it against the Go fleet client's, in turn in one run; p50s and
# p99s in microseconds.
bench-mcp:
	$(GO) test ./cmd/gated -run '^$$' -bench '^BenchmarkMCPProxy$$' -benchtime 1000x -count 1


# bench-history measures the policy path on an empty store and on stores
# prefilled with the histories of 100,000 and 1,000,000 proposals
# (gated-bench --prefill-curve), with gated's resident set along each run.
HISTORY_CURVE ?= 0,100000,1000000
bench-history: build
	mkdir -p bench-results
	./bin/gated-bench -n 60000 --mix denied=1,read=1 -c 256 --floor=false --prefill-curve $(HISTORY_CURVE) --json bench-results/history.json

# bench-scaleout measures one, two and three gated processes sharing the
# consumer on a three-node cluster on this machine (test/scaleout_bench_test.go).
bench-scaleout:
	mkdir -p bench-results
	bash -o pipefail -c 'GATED_BENCH_SCALEOUT=1 GATED_BENCH_SCALEOUT_JSON="$(CURDIR)/bench-results/scaleout.json" \
	  $(GO) test ./test -run "^TestBenchScaleOut$$" -count=1 -v -timeout 60m | tee bench-results/scaleout.txt'

# bench-clients measures the fleet clients' policy-path round trip (c=1,
# publish -> verdict) in Go, Python and TypeScript side by side against one
# gated, and prints each language's p50 against Go's (test/bench-clients.sh).
bench-clients: build $(PY_VENV)/.installed
	GO="$(GO)" bash test/bench-clients.sh

# bench-opa compares gated's policy decisions with OPA's REST API on the
# same bundle and inputs (test/opa-bench.sh).
bench-opa:
	bash test/opa-bench.sh

# bench-policy measures one policy decision of the default bundle:
# ns/op, allocs/op and the p50/p99 latency per decision.
bench-policy:
	$(GO) test ./policies -run '^$$' -bench '^BenchmarkEvaluate$$' -benchtime 20000x -count 5

# bench-plugins measures a review through a real plugin process, bare
# and with one brokered tool call: p50/p99 and reviews per second.
bench-plugins:
	$(GO) test ./plugins -run '^$$' -bench '^BenchmarkReviewRoundTrip$$' -benchtime 5000x -count 3

# bench-audit measures the chained audit trail: group commit against one
# record per round trip against unchained events, on a file and a memory
# stream: events/s, p50/p99 of Seal, records per publish.
bench-audit:
	$(GO) test ./bus/audit -run '^$$' -bench '^BenchmarkAuditTrail$$' -benchtime 2000x -count 3

# bench-replay measures gated policy replay on a recorded history of
# 20,000 proposals (their whole trails) in process: on one worker and on
# GOMAXPROCS, proposals/s end to end, records/s read, CPU per proposal.
bench-replay:
	$(GO) test ./bus/replay -run '^$$' -bench '^BenchmarkReplay$$' -benchtime 3x -count 3

# bench-verify measures audit verify's check of the stored verdicts at
# 10 000 and 100 000 verdicts: the index it keeps against one get per
# verdict, and the chain check alone (docs/AUDIT.md). It takes minutes.
bench-verify:
	$(GO) test ./bus/audit -run '^$$' -bench '^BenchmarkVerifyVerdicts$$' -benchtime 2x -timeout 30m

# bench-verify-cli times gated audit verify, the command, against a store
# holding the histories of VERIFY_PREFILL policy-decided proposals (gated
# bench --prefill --keep), with and without the stored verdicts' check:
# records/s, CPU a record, peak RSS (test/bench-verify.sh).
VERIFY_PREFILL ?= 1000000
bench-verify-cli: build
	mkdir -p bench-results
	bash -o pipefail -c 'PREFILL=$(VERIFY_PREFILL) JSON=bench-results/verify.jsonl bash test/bench-verify.sh | tee bench-results/verify.txt'

# opa-test runs the bundles' tests with stock OPA, built from the module
# proxy at the version in go.mod.
opa-test:
	$(GO) tool opa test policies/
	$(GO) tool opa test policies/ examples/policies/
	$(GO) tool opa check --strict policies/ examples/policies/

clean:
	rm -rf bin

# --- deploy: the container image and the Helm chart (docs/DEPLOY.md) ---
.PHONY: image test-deploy test-image test-chart
test: test-deploy

# image builds bin/gated-image.tar, gated's OCI image from scratch, with
# Debian's buildah and nothing pulled (deploy/image/build.sh).
IMAGE ?= bin/gated-image.tar
image:
	GO="$(GO)" bash deploy/image/build.sh $(IMAGE)

# test-deploy tests the image and the chart. test-image runs gated from
# the image's exported root filesystem, and under podman where the
# machine can run containers (deploy/image); test-chart lints and renders
# the chart for each documented setup and validates every manifest
# against the Kubernetes schemas (deploy/helm/check.sh), with helm built
# from the Go module proxy (cached in .cache/) and kubernetes-validate in
# a virtual environment of its own.
HELM_VERSION := v4.3.2
HELM := .cache/helm-$(HELM_VERSION)/helm
DEPLOY_VENV := .cache/deploy-venv
test-deploy: test-image test-chart

test-image: image
	GATED_IMAGE="$(CURDIR)/$(IMAGE)" GATED_IMAGE_PODMAN=try $(GO) test -count=1 -v ./deploy/image

$(HELM):
	GOBIN="$(CURDIR)/$(dir $(HELM))" CGO_ENABLED=0 GOFLAGS=-trimpath $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

$(DEPLOY_VENV)/.installed: deploy/helm/requirements.txt
	$(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install -q -r deploy/helm/requirements.txt
	touch $@

test-chart: build $(HELM) $(DEPLOY_VENV)/.installed
	HELM="$(CURDIR)/$(HELM)" PYTHON="$(CURDIR)/$(DEPLOY_VENV)/bin/python" GATED="$(CURDIR)/bin/gated" \
	  OUT="$(CURDIR)/.cache/chart-renders" bash deploy/helm/check.sh
