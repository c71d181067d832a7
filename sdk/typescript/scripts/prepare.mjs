// prepack: build dist/ with the pinned TypeScript when it is installed (a
// checkout with its dev dependencies), else keep the committed dist/ (an
// install of this directory from another project, which gets no dev
// dependencies).
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
