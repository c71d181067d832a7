package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// examples are the Examples sections of the commands' --help, by command
// path, each a list of command lines with an optional comment. They run
// from a checkout of gated against a gated serve on this machine.
// TestEveryCommandHasExamples holds every command to having some, and
// every line to naming its command and flags that exist.
var examples = map[string][]string{
	"gated": {
		"gated serve --personas examples/personas             # run the gate, with the example personas",
		"gated propose -f examples/proposals/approved.json    # propose, and print the verdict",
		"gated verdict get acme demo-approved-1               # the stored verdict again",
		"gated --version",
	},
	"gated serve": {
		"gated serve --personas examples/personas             # embedded NATS on 127.0.0.1:4222, data in ./gated-data",
		"gated serve --http 127.0.0.1:8080                    # /healthz, /readyz and /metrics",
		"gated serve --http 127.0.0.1:8080 --operators operators.yaml --metrics-listen 127.0.0.1:9090",
		"gated serve --config gated.yaml                      # flags, plugins and NATS settings from a file",
		"gated serve --nats-url nats://nats.internal:4222 --nats-creds gated.creds",
	},
	"gated propose": {
		"gated propose -f examples/proposals/approved.json",
		"gated propose -f examples/proposals/approved.json --watch   # each stage, then the verdict",
		"cat proposal.json | gated propose -f - --wait 2m",
	},
	"gated version": {"gated version"},
	"gated verdict": {"gated verdict get acme demo-approved-1"},
	"gated verdict get": {
		"gated verdict get acme demo-approved-1",
		"gated verdict get acme demo-approved-1 --nats-url nats://127.0.0.1:4222 --timeout 30s",
	},
	"gated audit": {
		"gated audit tail --tenant acme --follow",
		"gated audit query --outcome rejected --since 24h",
		"gated audit verify --audit-key-file gated-data/audit.key",
		"gated audit export --tenant acme --checkpoint-key-file ck.key --out acme.jsonl",
	},
	"gated audit tail": {
		"gated audit tail                                     # the latest 20 records",
		"gated audit tail --tenant acme --follow              # then every new one",
		"gated audit tail --since 90m --json",
	},
	"gated audit query": {
		"gated audit query --outcome rejected --since 24h",
		"gated audit query --operator alice --action db_drop_table --json",
		"gated audit query --tenant acme --limit 0            # every record of acme",
	},
	"gated audit verify": {
		"gated audit verify --audit-key-file gated-data/audit.key",
		"gated audit verify --audit-key-file gated-data/audit.key --json > heads.jsonl   # keep the heads",
		"gated audit verify --audit-key-file gated-data/audit.key --anchors heads.jsonl",
		"gated audit verify --bundle acme.jsonl --checkpoint-key-file ck.key   # an exported bundle, without NATS",
	},
	"gated audit checkpoint": {
		"gated audit checkpoint --checkpoint-key-file ck.key --create-key gated.example.com   # a key for the log gated.example.com",
		"gated audit checkpoint --checkpoint-key-file ck.key                # sign each tenant's head once",
		"gated audit checkpoint --checkpoint-key-file ck.key --every 10m    # and again every 10 minutes",
		"gated audit checkpoint --checkpoint-key-file ck.key --public-key",
	},
	"gated audit export": {
		"gated audit export --tenant acme --checkpoint-key-file ck.key --out acme.jsonl",
		"gated audit export --tenant acme --since 7d --ids demo-approved-1 --checkpoint-key-file ck.key",
	},
	"gated audit prove": {
		"gated audit prove acme demo-approved-1 --checkpoint-key-file ck.key",
		"gated audit prove acme --seq 7 --checkpoint-key-file ck.key        # the record of a verdict's audit_seq",
		"gated audit prove acme --from 1000 --to 1204 --checkpoint-key-file ck.key",
	},
	"gated budgets": {
		"gated budgets show acme",
		"gated budgets reset acme",
	},
	"gated budgets show": {
		"gated budgets show                                   # every tenant's counters",
		"gated budgets show acme --budgets budgets.yaml       # with the limits beside them",
	},
	"gated budgets reset": {"gated budgets reset acme"},
	"gated grants": {
		"gated grants keys",
		"gated grants rotate --data-dir gated-data",
	},
	"gated grants keys": {
		"gated grants keys                                    # the key set executors verify grants with",
		"gated grants keys --nats-url nats://127.0.0.1:4222 --timeout 30s",
	},
	"gated grants rotate": {
		"gated grants rotate --data-dir gated-data",
		"gated grants rotate --grant-key-file /etc/gated/grant.keys --grace 1m",
	},
	"gated mcp": {
		"gated mcp --tenant acme --agent ops-assistant -- ./bin/mcp-ops        # in an MCP client's server list",
		"gated mcp --tenant acme --agent ops-assistant --listen 127.0.0.1:8931 --upstream http://127.0.0.1:9000/mcp",
		"gated mcp --tenant acme --agent ops-assistant --print-tools -- ./bin/mcp-ops",
	},
	"gated operator": {
		"gated operator keygen --out alice.seed --id alice --tenant acme",
		"gated operator decide acme demo-held-1 --approve --operator alice --seed-file alice.seed",
		`gated operator clear-flow acme mailer --reason "the secret read was reviewed" --operator alice --seed-file alice.seed`,
	},
	"gated operator keygen": {
		"gated operator keygen --out alice.seed --id alice --tenant acme   # prints alice's operators-file entry",
	},
	"gated operator decide": {
		"gated operator decide acme demo-held-1 --approve --operator alice --seed-file alice.seed",
		`gated operator decide acme demo-held-1 --reject --reason "not during the freeze" --operator alice --seed-file alice.seed`,
		"gated operator decide acme run-7 --criterion ux=pass --operator alice --seed-file alice.seed",
	},
	"gated operator clear-flow": {
		`gated operator clear-flow acme mailer --reason "the secret read was reviewed" --operator alice --seed-file alice.seed`,
	},
	"gated personas": {
		"gated personas list examples/personas",
		"gated personas lint examples/personas",
	},
	"gated personas list": {
		"gated personas list                                  # the built-in personas",
		"gated personas list examples/personas --format json",
	},
	"gated personas lint": {
		"gated personas lint examples/personas",
		"gated personas lint examples/personas/operator.md --strict",
	},
	"gated plugins": {
		"gated plugins test ./my-reviewer",
		"gated plugins lock plugins.d",
		"gated plugins list --config gated.yaml --plugins-dir plugins.d",
	},
	"gated plugins list": {
		"gated plugins list --config gated.yaml --plugins-dir plugins.d",
		"gated plugins list --format json",
	},
	"gated plugins lock": {
		"gated plugins lock plugins.d                         # writes plugins.d/gated-plugins.lock",
	},
	"gated plugins verify": {
		"gated plugins verify plugins.d",
	},
	"gated plugins test": {
		"gated plugins test ./my-reviewer",
		"gated plugins test ./reviewer.py --env MODEL=gpt-4o --verbose",
		"gated plugins test ./my-reviewer --format json",
	},
	"gated policy": {
		"gated policy test examples/policies",
		"gated policy eval -f examples/proposals/approved.json",
		"gated policy replay --policies examples/policies --data-dir gated-data --since 24h",
	},
	"gated policy test": {
		"gated policy test                                    # the default bundle's own tests",
		"gated policy test examples/policies --include-default -v",
	},
	"gated policy check": {
		"gated policy check examples/policies",
		"gated policy check --policies examples/policies --policy-data config.yaml",
	},
	"gated policy eval": {
		"gated policy eval -f examples/proposals/approved.json",
		"gated policy eval -f examples/proposals/rejected-reviewer-tools.json --personas examples/personas --format json",
		"gated policy eval -f examples/proposals/approved.json --policies examples/policies --now 2026-01-02T16:00:00Z",
	},
	"gated policy replay": {
		"gated policy replay --policies examples/policies --data-dir gated-data --since 24h",
		"gated policy replay --policies examples/policies --nats-url nats://127.0.0.1:4222 --fail-on-flip",
	},
	"gated policy shadow": {
		"gated policy shadow report --since 24h",
	},
	"gated policy shadow report": {
		"gated policy shadow report --since 24h",
		"gated policy shadow report --tenant acme --first 50 --format json",
	},
	"gated report": {
		"gated report reviewers --since 168h",
	},
	"gated report reviewers": {
		"gated report reviewers --since 168h",
		"gated report reviewers --tenant acme --format json",
	},
}

// setExamples gives every command under c the Examples section of its
// --help from examples, unless it has one of its own.
func setExamples(c *cobra.Command) {
	if lines, ok := examples[c.CommandPath()]; ok && c.Example == "" {
		c.Example = "  " + strings.Join(lines, "\n  ")
	}
	for _, sub := range c.Commands() {
		setExamples(sub)
	}
}
