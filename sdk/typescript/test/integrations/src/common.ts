// What the framework tests share: one gated (its default bundle, acme's
// dns_* actions held for the operator alice), the catalog of the tools the
// fake models call, and a client that records the outcomes it reports.
import assert from "node:assert/strict";

import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Client, isFinal, type CallOptions, type OutcomeReport, type Proposal, type Verdict } from "@gated/client";
import { GatedTools, type GatedToolsOptions } from "@gated/client/integrations";

import { startHoldGated, type HoldGated } from "../../gated.mjs";

/** The catalog of the tests' tools, in gated mcp's format. */
export const catalog = `
tools:
  restart_service:
    action: host_restart_service
    target: {device_id: /device, service: /service}
    target_fixed: {tags: [production]}
  list_services:
    action: host_list_services
    class: read
  drop_table:
    class: destructive
  delete_dns_record:
    action: dns_delete_record
    target: {zone: /zone, record: /record}
`;

/** A device no other test restarts: the default policy lets a target cool down five minutes after a restart. */
export function freshDevice(): number {
  return 100_000 + Math.floor(Math.random() * 800_000);
}

export interface World {
  g: HoldGated;
  nc: NatsConnection;
  client: Client;
  /** The outcome reports the client sent, in order. */
  reports: OutcomeReport[];
  /** Every proposal sent and its verdict, in order. */
  seen: { p: Proposal; v: Verdict }[];
  tools(opts?: GatedToolsOptions): GatedTools;
  /** Waits until acme's proposal of an action, the since-th sent or later, is held, and returns its id. */
  heldProposal(action: string, since: number): Promise<string>;
  stop(): Promise<void>;
}

/** A client that records what it reports. */
class RecordingClient extends Client {
  constructor(
    nc: NatsConnection,
    readonly reports: OutcomeReport[],
  ) {
    super(nc);
  }
  override async reportOutcome(r: OutcomeReport, opts?: CallOptions): Promise<void> {
    await super.reportOutcome(r, opts);
    this.reports.push(r);
  }
}

export async function startWorld(framework: string): Promise<World> {
  const g = await startHoldGated();
  const nc = await connect({ servers: g.natsURL });
  const reports: OutcomeReport[] = [];
  const seen: { p: Proposal; v: Verdict }[] = [];
  const client = new RecordingClient(nc, reports);
  return {
    g,
    nc,
    client,
    reports,
    seen,
    tools: (opts = {}) =>
      new GatedTools(
        client,
        { tenant: "acme", agent: `${framework}-agent`, session: "s-1", operator: { id: "alice", roles: ["sre"] } },
        { catalogText: catalog, framework, observe: (p, v) => seen.push({ p, v }), ...opts },
      ),
    async heldProposal(action: string, since: number): Promise<string> {
      for (let i = 0; ; i++) {
        assert.ok(i < 600, `no ${action} proposal was held`);
        for (const { p, v } of seen.slice(since)) {
          if (p.action === action && !isFinal(v)) {
            return p.id;
          }
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      await nc.close();
      await g.stop();
    },
  };
}
