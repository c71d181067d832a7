// OpenAI Agents JS (`@openai/agents`): function tools whose needsApproval
// is gated's decision, and the run's approvals resumed by the operator's.
// It needs nothing of the Agents SDK at run time: a function tool is an
// object with name, needsApproval and invoke, which are wrapped.
import { ToolRefusedError } from "./core.js";
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
export function gateAgentTools(gated, tools) {
    return tools.map((t) => (isFunctionTool(t) ? wrap(gated, t) : t));
}
function isFunctionTool(t) {
    const f = t;
    return f.type === "function" && typeof f.name === "string" && typeof f.invoke === "function";
}
function wrap(gated, tool) {
    /** The arguments each call was proposed with, by call id, so that the run proposes the same. */
    const asked = new Map();
    return {
        ...tool,
        needsApproval: async (runContext, input, callId) => {
            if (callId === undefined) {
                return true; // nothing to tie the decision to the call: a person decides
            }
            asked.set(callId, input);
            let verdict;
            try {
                verdict = await gated.check(tool.name, input, callId);
            }
            catch (err) {
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
        invoke: async (runContext, input, details) => {
            const callId = details?.toolCall?.callId;
            let args;
            if (callId !== undefined && asked.has(callId)) {
                args = asked.get(callId);
                asked.delete(callId);
            }
            else {
                try {
                    args = input === "" ? {} : JSON.parse(input);
                }
                catch {
                    return `gated did not approve ${tool.name}: its arguments are not JSON. The call was not made.`;
                }
            }
            try {
                return await gated.run(tool.name, args, (reviewed) => tool.invoke(runContext, JSON.stringify(reviewed), details), {
                    callKey: callId,
                    signal: details?.signal,
                });
            }
            catch (err) {
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
export async function decideApprovals(gated, run, opts = {}) {
    let n = 0;
    for (const item of run.interruptions ?? []) {
        const raw = item.rawItem;
        if (raw?.type !== "function_call" || typeof raw.callId !== "string" || gated.held(raw.callId) === undefined) {
            continue;
        }
        try {
            await gated.decide(raw.callId, opts);
            run.state.approve(item);
        }
        catch (err) {
            if (!(err instanceof ToolRefusedError)) {
                throw err;
            }
            run.state.reject(item, { message: err.message });
        }
        n++;
    }
    return n;
}
