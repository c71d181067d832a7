import { type GatedTools } from "./core.js";
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
export declare function gateGraphTools<T extends LangChainToolLike>(gated: GatedTools, tools: T[]): T[];
