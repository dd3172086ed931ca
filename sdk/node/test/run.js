// npm test: builds fq-node once from this repository, then runs every test
// file with node's test runner (spec reporter: each test and the summary),
// exiting with its status. FQ_NODE_BIN skips the build.

import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

let tmp;
if (!process.env.FQ_NODE_BIN) {
  tmp = mkdtempSync(join(tmpdir(), "fq-node-bin-"));
  const bin = join(tmp, "fq-node");
  console.log(`building fq-node: go build -o ${bin} ./cmd/node`);
  execFileSync("go", ["build", "-o", bin, "./cmd/node"], { cwd: repoRoot, stdio: "inherit" });
  process.env.FQ_NODE_BIN = bin;
}

const files = readdirSync(here)
  .filter((f) => f.endsWith(".test.js"))
  .sort()
  .map((f) => join(here, f));
const child = spawn(process.execPath, ["--test", "--test-reporter=spec", ...process.argv.slice(2), ...files], {
  stdio: "inherit",
  env: process.env,
});
child.on("exit", (code, signal) => {
  if (tmp) rmSync(tmp, { recursive: true, force: true });
  process.exit(code ?? (signal ? 1 : 0));
});
