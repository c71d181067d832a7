export { actionName, ArgumentsError, CatalogError, decodeCatalog, defaultReasonArgument, mappingOf, maxCatalogSize, parsePointer, readCall, type Catalog, type MappedCall, type ToolMapping, type ToolRule, } from "./catalog.js";
export { GatedTools, ToolHeldError, ToolRefusedError, type GatedToolsOptions, type Refusal, type RunOptions } from "./core.js";
