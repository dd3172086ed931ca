// Test harness: a real fq-node on free loopback ports with a throwaway data
// dir, built once from this repository (or FQ_NODE_BIN).

import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const run = promisify(execFile);

/** The repository root (sdk/node/test → ../../..). */
export const repoRoot = fileURLToPath(new URL("../../../", import.meta.url));

export const ROOT_TOKEN = "fq_root_test";

/** @type {Promise<{bin: string, grpcFlag: boolean}> | undefined} */
let built;

/**
 * The fq-node binary: FQ_NODE_BIN when set (test/run.js builds it once for
 * every test file), else built here into a temp dir. grpcFlag says whether
 * this build has --grpc-addr (then the tests turn it off, so parallel nodes
 * do not fight over its default port).
 */
export function fqNode() {
  built ??= (async () => {
    let bin = process.env.FQ_NODE_BIN;
    if (!bin) {
      const dir = await mkdtemp(join(tmpdir(), "fq-node-bin-"));
      bin = join(dir, "fq-node");
      await run("go", ["build", "-o", bin, "./cmd/node"], { cwd: repoRoot, maxBuffer: 16 << 20 });
    }
    // --help prints the flags on stderr and exits 0.
    const help = await run(bin, ["--help"]).catch((e) => e);
    const grpcFlag = `${help.stdout ?? ""}${help.stderr ?? ""}`.includes("-grpc-addr");
    return { bin, grpcFlag };
  })();
  return built;
}

/** A free loopback port. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => resolve(typeof addr === "object" && addr ? addr.port : 0));
    });
  });
}

const children = new Set();
process.on("exit", () => {
  for (const c of children) c.kill("SIGKILL");
});

/**
 * Starts an fq-node and waits until GET /healthz answers 200.
 * @param {{env?: Record<string, string>}} [options]
 */
export async function startNode(options = {}) {
  const { bin, grpcFlag } = await fqNode();
  const dataDir = await mkdtemp(join(tmpdir(), "fq-node-data-"));
  const natsPort = await freePort();
  const adminPort = await freePort();
  const args = [
    "--data-dir", dataDir,
    "--nats-listen", `127.0.0.1:${natsPort}`,
    "--admin-addr", `127.0.0.1:${adminPort}`,
    "--root-token", ROOT_TOKEN,
    "--node-id", "nodetest",
  ];
  if (grpcFlag) args.push("--grpc-addr", "");
  const child = spawn(bin, args, {
    env: { ...process.env, FLEXIQ_MAINTENANCE: "off", ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let stderr = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d) => {
    stderr = (stderr + d).slice(-8192);
  });
  /** @type {Promise<{code: number | null, signal: string | null, error?: Error}>} */
  const exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", (error) => resolve({ code: null, signal: null, error }));
  });
  exited.then(() => children.delete(child));

  // The banner's last line is printed once the node serves.
  const serving = new Promise((resolve, reject) => {
    let out = "";
    child.stdout.setEncoding("utf8");
    const onData = (/** @type {string} */ d) => {
      out += d;
      if (out.includes("maintenance:")) {
        child.stdout.off("data", onData);
        child.stdout.resume();
        resolve(undefined);
      }
    };
    child.stdout.on("data", onData);
    exited.then(({ code, signal, error }) =>
      reject(new Error(`fq-node ${error ? `failed: ${error.message}` : `exited (${code ?? signal})`} before serving:\n${out}\n${stderr}`)),
    );
  });
  try {
    await serving;
  } catch (err) {
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
  const node = {
    natsUrl: `nats://127.0.0.1:${natsPort}`,
    adminUrl: `http://127.0.0.1:${adminPort}`,
    dataDir,
    child,
    exited,
    get stderr() {
      return stderr;
    },
    /**
     * One admin door call.
     * @param {string} method
     * @param {string} path
     * @param {{token?: string, body?: unknown}} [o]
     */
    async http(method, path, o = {}) {
      const res = await fetch(node.adminUrl + path, {
        method,
        headers: {
          authorization: `Bearer ${o.token ?? ROOT_TOKEN}`,
          ...(o.body !== undefined ? { "content-type": "application/json" } : {}),
        },
        body: o.body !== undefined ? JSON.stringify(o.body) : undefined,
      });
      const text = await res.text();
      let body;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = text;
      }
      return { status: res.status, body };
    },
    /**
     * A fresh namespace and a token for each role.
     * @returns {Promise<{ns: string, admin: string, producer: string, worker: string}>}
     */
    async tenant() {
      const ns = "t-" + randomBytes(6).toString("hex");
      /** @type {Record<string, string>} */
      const tokens = {};
      for (const role of ["admin", "producer", "worker"]) {
        const r = await node.http("POST", "/v1/tokens", { body: { namespace: ns, role } });
        if (r.status !== 201) throw new Error(`POST /v1/tokens: ${r.status} ${JSON.stringify(r.body)}`);
        tokens[role] = r.body.token;
      }
      return { ns, admin: tokens.admin, producer: tokens.producer, worker: tokens.worker };
    },
    /**
     * GET /v1/usage of a namespace (an admin token of it).
     * @param {string} adminToken
     */
    async usage(adminToken) {
      const r = await node.http("GET", "/v1/usage", { token: adminToken });
      if (r.status !== 200) throw new Error(`GET /v1/usage: ${r.status} ${JSON.stringify(r.body)}`);
      return r.body.usage;
    },
    /** SIGTERM, then wait for the exit. */
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
      await exited;
      await rm(dataDir, { recursive: true, force: true });
    },
    /** SIGKILL, then wait for the exit. */
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
  const health = await fetch(node.adminUrl + "/healthz").catch((e) => e);
  if (!(health instanceof Response) || health.status !== 200) {
    await node.kill();
    await rm(dataDir, { recursive: true, force: true });
    throw new Error(`fq-node: GET /healthz: ${health instanceof Response ? health.status : health}\n${stderr}`);
  }
  return node;
}

/**
 * A promise and its resolvers (Promise.withResolvers, for Node 20).
 * @template T
 */
export function deferred() {
  /** @type {(v: T) => void} */
  let resolve = () => {};
  /** @type {(e: unknown) => void} */
  let reject = () => {};
  /** @type {Promise<T>} */
  const promise = new Promise((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
