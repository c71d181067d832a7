// LangGraph.js (`@langchain/langgraph`): LangChain tools whose calls run
// only as gated allows, where a call held for an operator becomes the
// graph's interrupt and the graph, resumed, runs it only on the operator's
// approval as gated's stored verdict has it. It needs @langchain/langgraph
// at run time for interrupt, and nothing else of LangChain: a tool is an
// object with a name and invoke(input, config), which is wrapped.

import { createHash } from "node:crypto";

import { ToolHeldError, ToolRefusedError, type GatedTools } from "./core.js";

/** What the gate reads of a LangChain tool. */
export interface LangChainToolLike {
  name: string;
  invoke(input: unknown, config?: unknown): Promise<unknown>;
}

/** What a held call's interrupt carries: what gated holds, for the application to show. */
export interface HeldInterrupt {
  gated: "held";
  tool: string;
  action: string;
  /** The held proposal, tenant and id. */
  tenant: string;
  proposal_id: string;
  reason: string;
  rule?: string;
  /** When gated times the hold out. */
  deadline?: string;
}

interface ToolCallLike {
  type?: string;
  id?: string;
  name?: string;
  args?: unknown;
}

interface ConfigLike {
  toolCall?: ToolCallLike;
  configurable?: { thread_id?: unknown };
}

type Interrupt = (value: unknown) => unknown;

let interruptFn: Promise<Interrupt> | undefined;

/** LangGraph's interrupt, from the application's own @langchain/langgraph. */
function langGraphInterrupt(): Promise<Interrupt> {
  const name = "@langchain/langgraph";
  interruptFn ??= import(name).then((m: { interrupt: Interrupt }) => m.interrupt);
  return interruptFn;
}

/**
 * Returns the tools with each one's calls behind gated (GatedTools.run),
 * under the tool's name in the catalog: a read at once; a write or
 * destructive call once gated approves it, with exactly the arguments the
 * proposal carried. A refusal answers the model with its text in place of
 * running. A call held for an operator calls LangGraph's interrupt with a
 * HeldInterrupt, so the graph stops (it needs a checkpointer); resumed
 * (Command({ resume })), the call waits for the operator's decision as
 * gated stores it, whatever the resume value says, and runs only on an
 * approval. The proposal of a call is named by the graph's thread and the
 * tool call's id, so the call resumed in another process is the same
 * proposal. When gated cannot be asked, the call throws the client's
 * error: it did not run (a ToolNode hands the model the error unless its
 * handleToolErrors is off, and then the graph fails).
 */
export function gateGraphTools<T extends LangChainToolLike>(gated: GatedTools, tools: T[]): T[] {
  return tools.map((t) => wrap(gated, t));
}

function wrap<T extends LangChainToolLike>(gated: GatedTools, tool: T): T {
  const invoke = async (input: unknown, config?: ConfigLike): Promise<unknown> => {
    const call = isToolCall(input) ? input : undefined;
    const args = call ? call.args : input;
    const callId = call?.id ?? config?.toolCall?.id;
    const thread = config?.configurable?.thread_id;
    const threaded = callId !== undefined && (typeof thread === "string" || typeof thread === "number");
    // Tool call ids are a model's, unique within a thread at best.
    const key = threaded ? `${String(thread)}\n${callId}` : callId;
    const proposalId = threaded ? "lg-" + createHash("sha256").update(key!).digest("hex").slice(0, 32) : undefined;
    const exec = (reviewed: Record<string, unknown>) => tool.invoke(call ? { ...call, args: reviewed } : reviewed, config);
    const opts = { callKey: key, proposalId };
    try {
      return await gated.run(tool.name, args, exec, opts);
    } catch (err) {
      if (err instanceof ToolHeldError) {
        if (key === undefined) {
          return err.message; // no tool call id to resume it by: the model reads that it is held
        }
        const v = err.verdict;
        const held: HeldInterrupt = {
          gated: "held",
          tool: tool.name,
          action: err.refusal.action,
          tenant: v.tenant,
          proposal_id: v.proposal_id,
          reason: err.refusal.reason,
          rule: err.refusal.rule,
          deadline: v.awaiting_operator?.deadline,
        };
        (await langGraphInterrupt())(held); // stops the graph; returns once it is resumed
        try {
          await gated.decide(key);
        } catch (e) {
          if (e instanceof ToolRefusedError) {
            return e.message;
          }
          throw e;
        }
        return await refusalText(() => gated.run(tool.name, args, exec, opts));
      }
      if (err instanceof ToolRefusedError) {
        return err.message;
      }
      throw err;
    }
  };
  return Object.create(tool, { invoke: { value: invoke, enumerable: true } }) as T;
}

async function refusalText(f: () => Promise<unknown>): Promise<unknown> {
  try {
    return await f();
  } catch (err) {
    if (err instanceof ToolRefusedError) {
      return err.message;
    }
    throw err;
  }
}

function isToolCall(v: unknown): v is ToolCallLike {
  return typeof v === "object" && v !== null && (v as ToolCallLike).type === "tool_call" && "args" in v;
}
