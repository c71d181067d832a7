// OpenAI Agents JS (`@openai/agents`): function tools whose needsApproval
// is gated's decision, and the run's approvals resumed by the operator's.
// It needs nothing of the Agents SDK at run time: a function tool is an
// object with name, needsApproval and invoke, which are wrapped.

import type { CallOptions } from "../client.js";
import { ToolRefusedError, type GatedTools } from "./core.js";

/** What the gate reads of an Agents SDK function tool. */
export interface FunctionToolLike {
  type: "function";
  name: string;
  invoke: (runContext: never, input: string, details?: { toolCall?: { callId?: string }; signal?: AbortSignal }) => Promise<unknown>;
  needsApproval: (runContext: never, input: never, callId?: string) => Promise<boolean>;
}

/** What the gate reads of a run's interruption (a RunToolApprovalItem). */
export interface ApprovalItemLike {
  rawItem?: unknown;
}

/** What the gate reads of a run result, or of its state: the interruptions, and approve and reject. */
export interface InterruptedRunLike<I extends ApprovalItemLike> {
  interruptions?: I[];
  state: {
    approve(item: I): void;
    reject(item: I, options?: { message?: string }): void;
  };
}

/**
 * Returns the tools with every function tool behind gated; other tools
 * (hosted, computer, shell) are returned as they are. A call is proposed
 * when the Agents SDK asks whether it needs approval: an approval lets it
 * run, once, through its grant, with the arguments the proposal carried; a
 * refusal lets the SDK call it, and the call answers the model with the
 * refusal's text in place of running (the tool did not run); a call held
 * for an operator needs approval, so the run stops with an interruption
 * that decideApprovals resolves by the operator's decision. When gated
 * cannot be asked, needsApproval throws and the run fails: nothing runs.
 * A tool's own needsApproval still applies after gated's approval.
 */
export function gateAgentTools<T extends object>(gated: GatedTools, tools: T[]): T[] {
  return tools.map((t) => (isFunctionTool(t) ? (wrap(gated, t) as T) : t));
}

function isFunctionTool(t: object): t is FunctionToolLike {
  const f = t as Partial<FunctionToolLike>;
  return f.type === "function" && typeof f.name === "string" && typeof f.invoke === "function";
}

function wrap(gated: GatedTools, tool: FunctionToolLike): FunctionToolLike {
  /** The arguments each call was proposed with, by call id, so that the run proposes the same. */
  const asked = new Map<string, unknown>();
  return {
    ...tool,
    needsApproval: async (runContext: never, input: never, callId?: string): Promise<boolean> => {
      if (callId === undefined) {
        return true; // nothing to tie the decision to the call: a person decides
      }
      asked.set(callId, input);
      let verdict: "approved" | "held";
      try {
        verdict = await gated.check(tool.name, input, callId);
      } catch (err) {
        if (err instanceof ToolRefusedError) {
          return false; // invoke answers the model with the refusal
        }
        throw err;
      }
      if (verdict === "held") {
        return true;
      }
      return typeof tool.needsApproval === "function" ? await tool.needsApproval(runContext, input, callId) : false;
    },
    invoke: async (runContext: never, input: string, details?: { toolCall?: { callId?: string }; signal?: AbortSignal }): Promise<unknown> => {
      const callId = details?.toolCall?.callId;
      let args: unknown;
      if (callId !== undefined && asked.has(callId)) {
        args = asked.get(callId);
        asked.delete(callId);
      } else {
        try {
          args = input === "" ? {} : JSON.parse(input);
        } catch {
          return `gated did not approve ${tool.name}: its arguments are not JSON. The call was not made.`;
        }
      }
      try {
        return await gated.run(tool.name, args, (reviewed) => tool.invoke(runContext, JSON.stringify(reviewed), details), {
          callKey: callId,
          signal: details?.signal,
        });
      } catch (err) {
        if (err instanceof ToolRefusedError) {
          return err.message;
        }
        throw err;
      }
    },
  };
}

/**
 * Resolves a run's interruptions that gated holds, by the operator's
 * decision as gated's stored verdict has it: an approval approves the
 * call (the run, resumed with the state, runs it through its grant), a
 * rejection or the hold's deadline rejects it with the refusal's text for
 * the model. Interruptions gated does not hold are left to the caller.
 * Resolves with the number resolved; throws when gated cannot be asked
 * (nothing is approved then).
 */
export async function decideApprovals<I extends ApprovalItemLike>(gated: GatedTools, run: InterruptedRunLike<I>, opts: CallOptions = {}): Promise<number> {
  let n = 0;
  for (const item of run.interruptions ?? []) {
    const raw = item.rawItem as { type?: string; callId?: string } | undefined;
    if (raw?.type !== "function_call" || typeof raw.callId !== "string" || gated.held(raw.callId) === undefined) {
      continue;
    }
    try {
      await gated.decide(raw.callId, opts);
      run.state.approve(item);
    } catch (err) {
      if (!(err instanceof ToolRefusedError)) {
        throw err;
      }
      run.state.reject(item, { message: err.message });
    }
    n++;
  }
  return n;
}
