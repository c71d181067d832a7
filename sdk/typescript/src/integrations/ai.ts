// The Vercel AI SDK (`ai`): a tool set whose tools run only as gated
// allows. It needs nothing of the AI SDK at run time: a tool is an object
// with an execute(input, options) function, which is wrapped.

import type { GatedTools } from "./core.js";

/** The options the AI SDK calls a tool's execute with, as far as the gate reads them. */
export interface AIToolCallOptions {
  toolCallId: string;
  abortSignal?: AbortSignal;
}

type Executable = { execute?: (input: unknown, options: AIToolCallOptions) => unknown };

/**
 * Returns the tool set with each tool's execute behind gated, under the
 * tool's key in the set as its name in the catalog. A call then runs only
 * as GatedTools.run lets it: a read at once; a write or destructive call
 * once gated approves it, with exactly the input the proposal carried
 * (the catalog's reason argument taken out). A refusal throws
 * ToolRefusedError, which the AI SDK hands the model as the tool's error
 * (its message says what gated decided and why) and the caller finds in
 * the step's tool-error part; a call held for an operator throws
 * ToolHeldError, or waits for the decision when the GatedTools waits for
 * operators (awaitOperator). A tool without execute, which the AI SDK
 * leaves to the caller to run, is returned as it is: gate that run with
 * GatedTools.run.
 */
export function gateTools<T extends Record<string, object>>(gated: GatedTools, tools: T): T {
  const out: Record<string, object> = {};
  for (const [name, tool] of Object.entries(tools)) {
    const execute = (tool as Executable).execute;
    if (typeof execute !== "function") {
      out[name] = tool;
      continue;
    }
    out[name] = {
      ...tool,
      execute: (input: unknown, options: AIToolCallOptions) =>
        gated.run(name, input, (reviewed) => execute.call(tool, reviewed, options), {
          callKey: options?.toolCallId,
          signal: options?.abortSignal,
        }),
    };
  }
  return out as T;
}
