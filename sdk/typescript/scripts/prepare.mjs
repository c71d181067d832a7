// prepack: build dist/ with the pinned TypeScript when it is installed (a
// checkout with its dev dependencies), else pack the committed dist/ (a
// directory packed for an install-links install elsewhere, which has no dev
// dependencies). It is no install script: an install of the package runs
// nothing.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
let tsc;
try {
  tsc = require.resolve("typescript/bin/tsc");
} catch {
  tsc = undefined;
}
if (tsc) {
  execFileSync(process.execPath, [tsc, "-p", "tsconfig.json"], { stdio: "inherit" });
} else if (!existsSync(new URL("../dist/index.js", import.meta.url))) {
  console.error("@gated/client: dist/ is missing and TypeScript is not installed: run npm ci in sdk/typescript");
  process.exit(1);
}
