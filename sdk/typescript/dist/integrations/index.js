// @gated/client/integrations: the core of the agent framework integrations,
// the catalog and GatedTools. Each framework's hook is a subpath of its
// own: @gated/client/ai, @gated/client/openai-agents,
// @gated/client/langgraph.
export { actionName, ArgumentsError, CatalogError, decodeCatalog, defaultReasonArgument, mappingOf, maxCatalogSize, parsePointer, readCall, } from "./catalog.js";
export { GatedTools, ToolHeldError, ToolRefusedError } from "./core.js";
