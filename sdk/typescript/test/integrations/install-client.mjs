// Installs @gated/client here as a user would: packed by npm pack from
// sdk/typescript and installed from the tarball, so that the integrations'
// subpaths and their peer dependencies (this project's frameworks)
// resolve as they do in an application.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const sdk = fileURLToPath(new URL("../../", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "gated-client-pack-"));
try {
  execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: sdk, stdio: ["ignore", "ignore", "inherit"] });
  const tgz = readdirSync(dir).find((f) => f.endsWith(".tgz"));
  if (!tgz) {
    throw new Error("npm pack wrote no tarball");
  }
  execFileSync("npm", ["install", "--no-save", "--no-audit", "--no-fund", join(dir, tgz)], { cwd: here, stdio: "inherit" });
} finally {
  rmSync(dir, { recursive: true, force: true });
}
