// The client against a real fq-node: the calls, the admission refusals
// with their exact code, reason and message, the bus's permissions, and
// unreachable nodes.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { connect as natsConnect, errors as natsErrors } from "@nats-io/transport-node";

import {
  Client,
  ConnectionLostError,
  FlexiQError,
  UnreachableError,
  connect,
  connectOptions,
  inboxPrefix,
} from "../src/index.js";
import { startNode } from "./harness.js";

/** @type {Awaited<ReturnType<typeof startNode>>} */
let node;
/** @type {Client[]} */
const clients = [];

/** @param {string} token */
async function dial(token) {
  const c = await connect({ servers: node.natsUrl, token });
  clients.push(c);
  return c;
}

/**
 * Asserts that p rejects with a FlexiQError of exactly this code, reason and
 * message.
 * @param {Promise<unknown>} p
 * @param {{code: string, reason: string, message: string | RegExp}} want
 */
async function refused(p, want) {
  const err = await p.then(
    (v) => assert.fail(`expected a refusal, got ${JSON.stringify(v)}`),
    (e) => e,
  );
  assert.ok(err instanceof FlexiQError, `expected a FlexiQError, got ${err?.stack ?? err}`);
  assert.equal(err.code, want.code);
  assert.equal(err.reason, want.reason);
  if (want.message instanceof RegExp) assert.match(err.message, want.message);
  else assert.equal(err.message, want.message);
  return err;
}

before(async () => {
  node = await startNode();
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await node?.stop();
});

describe("producer and worker calls", () => {
  it("enqueue, claim and ack: the job completes with its result", async () => {
    const t = await node.tenant();
    const producer = await dial(t.producer);
    const worker = await dial(t.worker);

    const res = await producer.enqueue({ queue: "q", task: "send", payload: { to: "a@example.com" }, priority: 3 });
    assert.equal(res.outcome, "enqueued");
    assert.ok(res.id);

    const jobs = await worker.claim({ queues: ["q"], max: 10, waitMs: 1000, leaseMs: 5000, worker: "w1" });
    assert.equal(jobs.length, 1);
    const [job] = jobs;
    assert.equal(job.id, res.id);
    assert.equal(job.status, "running");
    assert.equal(job.attempt, 1);
    assert.deepEqual(job.payload, { to: "a@example.com" });
    assert.equal(job.priority, 3);
    assert.ok(job.lease_until);

    await worker.ack(job, { result: { sent: true } });
    const shown = await node.http("GET", `/v1/jobs/${encodeURIComponent(job.id)}`, { token: t.admin });
    assert.equal(shown.status, 200);
    assert.equal(shown.body.status, "completed");
    assert.deepEqual(shown.body.result, { sent: true });
    assert.deepEqual(await node.usage(t.admin), { pending: 0, running: 0, archived: 1, dead: 0 });
  });

  it("enqueueMany, unique_key dedup, heartbeat, ackMany with a per-entry error, nack, replay", async () => {
    const t = await node.tenant();
    const producer = await dial(t.producer);
    const worker = await dial(t.worker);
    const admin = await dial(t.admin);

    const res = await producer.enqueueMany([
      { id: "a", queue: "q", task: "t" },
      { id: "b", queue: "q", task: "t", unique_key: "k" },
      { id: "c", queue: "q", task: "t", unique_key: "k" },
      { id: "d", queue: "q", task: "t", run_at: new Date(Date.now() + 3_600_000) },
    ]);
    assert.deepEqual(res, [
      { id: "a", outcome: "enqueued" },
      { id: "b", outcome: "enqueued" },
      { id: "b", outcome: "deduplicated" },
      { id: "d", outcome: "enqueued" },
    ]);

    const jobs = await worker.claim({ queues: ["q"], max: 10, leaseMs: 5000 });
    assert.deepEqual(jobs.map((j) => j.id).sort(), ["a", "b"], "d is not due yet");
    assert.deepEqual((await worker.heartbeat(["a", "b", "nope"], { leaseMs: 10_000 })).sort(), ["a", "b"]);

    const acks = await worker.ackMany([
      { id: "a", attempt: 1, result: 1 },
      { id: "nope", attempt: 1 },
    ]);
    assert.equal(acks.length, 2);
    assert.deepEqual(acks[0], { id: "a" });
    assert.equal(acks[1].id, "nope");
    assert.ok(acks[1].error instanceof FlexiQError);
    assert.deepEqual(acks[1].error.toJSON(), { code: "NOT_FOUND", reason: "UNKNOWN_JOB", message: "job 'nope' not found" });

    const b = jobs.find((j) => j.id === "b");
    assert.ok(b);
    const nacked = await worker.nack(b, { error: "boom", retry: false });
    assert.deepEqual(nacked, { status: "dead" });
    const dead = await node.http("GET", "/v1/jobs/b", { token: t.admin });
    assert.equal(dead.body.status, "dead");
    assert.equal(dead.body.error, "boom");

    // Replay is an admin's call; the dead letter is pending again, attempts reset.
    await refused(worker.replay(["b"]), {
      code: "PERMISSION_DENIED",
      reason: "",
      message: "a worker token may not replay dead letters",
    });
    assert.deepEqual(await admin.replay(["b"]), [{ id: "b", outcome: "enqueued" }]);
    const again = await worker.claim({ queues: ["q"], max: 10 });
    assert.deepEqual(
      again.map((j) => [j.id, j.attempt]),
      [["b", 1]],
    );
    const retried = await worker.nack(again[0], { error: "try later" });
    assert.equal(retried.status, "pending");
    assert.ok(Date.parse(retried.runAt ?? "") > Date.now() - 1000);
  });

  it("publishEvent enqueues one job per trigger", async () => {
    const t = await node.tenant();
    for (const task of ["confirm", "invoice"]) {
      const r = await node.http("POST", "/v1/triggers", {
        token: t.admin,
        body: { event: "order.created", queue: "mail", task },
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
    }
    const producer = await dial(t.producer);
    const res = await producer.publishEvent("order.created", { order: 7 });
    assert.equal(res.length, 2);
    assert.deepEqual(await producer.publishEvent("nothing.listens"), []);
    const worker = await dial(t.worker);
    const jobs = await worker.claim({ queues: ["mail"], max: 10 });
    assert.deepEqual(jobs.map((j) => j.task).sort(), ["confirm", "invoice"]);
    assert.deepEqual(jobs[0].payload, { order: 7 });
  });

  it("release gives a claimed job back unstarted: pending again, its attempt not spent", async () => {
    const t = await node.tenant();
    const producer = await dial(t.producer);
    const worker = await dial(t.worker);
    await producer.enqueue({ id: "r", queue: "q", task: "t" });
    const [job] = await worker.claim({ queues: ["q"] });
    assert.equal(job.attempt, 1);
    await worker.release(job);
    assert.deepEqual(await node.usage(t.admin), { pending: 1, running: 0, archived: 0, dead: 0 });
    const [again] = await worker.claim({ queues: ["q"] });
    assert.equal(again.id, "r");
    assert.equal(again.attempt, 1);
    await worker.ack(again);
  });

  it("an ack under a lost lease is LEASE_LOST, of an unknown job UNKNOWN_JOB", async () => {
    const t = await node.tenant();
    const producer = await dial(t.producer);
    const worker = await dial(t.worker);
    await producer.enqueue({ id: "j", queue: "q", task: "t" });
    const [job] = await worker.claim({ queues: ["q"] });
    await refused(worker.ack(job, { attempt: job.attempt + 1 }), {
      code: "ABORTED",
      reason: "LEASE_LOST",
      message: "job 'j' is not running under this lease",
    });
    await refused(worker.ack("nope"), { code: "NOT_FOUND", reason: "UNKNOWN_JOB", message: "job 'nope' not found" });
    await worker.ack(job);
  });
});

describe("admission refusals", () => {
  it("QUEUE_FULL: the exact message, nothing written", async () => {
    const t = await node.tenant();
    const put = await node.http("PUT", "/v1/quota", { token: t.admin, body: { max_pending: 2 } });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const producer = await dial(t.producer);
    await producer.enqueue({ queue: "q", task: "t" });
    await producer.enqueue({ queue: "q", task: "t" });
    await refused(producer.enqueue({ queue: "q", task: "t" }), {
      code: "RESOURCE_EXHAUSTED",
      reason: "QUEUE_FULL",
      message: "queue 'q' is full: 2 pending >= max_pending 2",
    });
    assert.equal((await node.usage(t.admin)).pending, 2);
  });

  it("RATE_LIMITED: the exact message", async () => {
    const t = await node.tenant();
    const put = await node.http("PUT", "/v1/quota", { token: t.admin, body: { enqueue_rate: "3/h" } });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    const producer = await dial(t.producer);
    await producer.enqueueMany([
      { queue: "q", task: "t" },
      { queue: "q", task: "t" },
    ]);
    // Two jobs do not fit in the one token left: the batch is refused whole.
    await refused(
      producer.enqueueMany([
        { queue: "q", task: "t" },
        { queue: "q", task: "t" },
      ]),
      {
        code: "RESOURCE_EXHAUSTED",
        reason: "RATE_LIMITED",
        message: `rate limit exceeded for: namespace '${t.ns}' enqueue_rate 3/h`,
      },
    );
    assert.equal((await producer.enqueue({ queue: "q", task: "t" })).outcome, "enqueued");
    assert.equal((await node.usage(t.admin)).pending, 3);
  });

  it("INVALID_ARGUMENT for a field out of range, BAD_REQUEST for a body that does not fit", async () => {
    const t = await node.tenant();
    const producer = await dial(t.producer);
    await refused(producer.enqueue({ queue: "bad queue", task: "t" }), {
      code: "INVALID_ARGUMENT",
      reason: "",
      message: 'jobs[0].queue: must be 1-128 bytes of [A-Za-z0-9._:-], got "bad queue"',
    });
    await refused(producer.enqueueMany([]), {
      code: "INVALID_ARGUMENT",
      reason: "",
      message: "jobs: must hold at least one job",
    });
    await refused(producer.enqueue({ queue: "q", task: "t", priority: /** @type {any} */ ("high") }), {
      code: "INVALID_ARGUMENT",
      reason: "BAD_REQUEST",
      message: "jobs.priority: must be an integer, got string",
    });
    await refused(producer.request("fq.v1.enqueue", "not json"), {
      code: "INVALID_ARGUMENT",
      reason: "BAD_REQUEST",
      message: /^request body is not valid JSON: /,
    });
    assert.equal((await node.usage(t.admin)).pending, 0);
  });

  it("PERMISSION_DENIED: a worker token may not enqueue", async () => {
    const t = await node.tenant();
    const worker = await dial(t.worker);
    await refused(worker.enqueue({ queue: "q", task: "t" }), {
      code: "PERMISSION_DENIED",
      reason: "",
      message: "a worker token may not enqueue",
    });
    const producer = await dial(t.producer);
    await refused(producer.claim({ queues: ["q"] }), {
      code: "PERMISSION_DENIED",
      reason: "",
      message: "a producer token may not claim jobs",
    });
  });
});

describe("tokens and the bus", () => {
  const unauthenticated = {
    code: "UNAUTHENTICATED",
    reason: "",
    message: "missing or invalid token: send Authorization: Bearer <token>",
  };

  it("a bad token is refused at connect as UNAUTHENTICATED", async () => {
    const err = await refused(connect({ servers: node.natsUrl, token: "fq_not_a_token" }), unauthenticated);
    assert.ok(err.cause instanceof natsErrors.AuthorizationError);
  });

  it("a request whose Authorization header is bad is UNAUTHENTICATED with the same message", async () => {
    const t = await node.tenant();
    const good = await dial(t.producer);
    // The connection's token admits the connection; the header decides the request.
    const bad = new Client(good.nc, "fq_not_a_token");
    await refused(bad.enqueue({ queue: "q", task: "t" }), unauthenticated);
  });

  it("a revoked token's connection is refused at connect", async () => {
    const r = await node.http("POST", "/v1/tokens", { body: { namespace: "revoked", role: "producer" } });
    assert.equal(r.status, 201);
    const del = await node.http("DELETE", `/v1/tokens/${r.body.id}`);
    assert.ok(del.status === 200 || del.status === 204, String(del.status));
    await refused(connect({ servers: node.natsUrl, token: r.body.token }), unauthenticated);
  });

  it("the private inbox: subscribing to '>', '_INBOX.>' or another token's inbox is a permissions violation", async () => {
    const t = await node.tenant();
    assert.match(inboxPrefix(t.worker), /^_INBOX_[0-9a-f]{16}$/);
    const nc = await natsConnect({ servers: node.natsUrl, ...connectOptions(t.worker) });
    try {
      for (const subject of [">", "_INBOX.>", `${inboxPrefix(t.producer)}.>`, "fq.v1.enqueue"]) {
        const sub = nc.subscribe(subject);
        const err = await sub.closed;
        assert.ok(err instanceof natsErrors.PermissionViolationError, `${subject}: ${err}`);
        assert.equal(err.operation, "subscription");
        assert.equal(err.subject, subject);
      }
      // Its own inbox is fine: a request through the SDK on the same connection works.
      const c = new Client(nc, t.worker);
      assert.deepEqual(await c.claim({ queues: ["q"] }), []);
    } finally {
      await nc.close();
    }
  });

  it("a connection without the private inbox prefix gets no replies", async () => {
    const t = await node.tenant();
    const nc = await natsConnect({ servers: node.natsUrl, token: t.worker });
    try {
      const c = new Client(nc, t.worker);
      const err = await c.claim({ queues: ["q"] }).catch((e) => e);
      assert.ok(err instanceof UnreachableError, String(err));
      assert.match(err.message, /Permissions Violation for Subscription to "_INBOX\./);
    } finally {
      await nc.close();
    }
  });
});

describe("cancellation and unreachable nodes", () => {
  it("an aborted signal rejects with its reason; a timeout is UnreachableError", async () => {
    const t = await node.tenant();
    const worker = await dial(t.worker);

    const pre = AbortSignal.abort();
    await assert.rejects(worker.claim({ queues: ["q"] }, { signal: pre }), { name: "AbortError" });

    const ac = new AbortController();
    const waiting = worker.claim({ queues: ["q"], waitMs: 60_000, signal: ac.signal });
    ac.abort();
    await assert.rejects(waiting, { name: "AbortError" });

    const err = await worker.claim({ queues: ["q"], waitMs: 60_000 }, { timeout: 200 }).catch((e) => e);
    assert.ok(err instanceof UnreachableError, String(err));
    assert.ok(err.cause instanceof natsErrors.TimeoutError, String(err.cause));
    assert.equal(err.subject, "fq.v1.claim");
  });

  it("jobs the node hands to a claim after its signal aborted are released", async () => {
    const t = await node.tenant();
    const worker = await dial(t.worker);
    const producer = await dial(t.producer);
    const ac = new AbortController();
    const waiting = worker.claim({ queues: ["q"], waitMs: 60_000, leaseMs: 60_000, signal: ac.signal });
    await worker.nc.flush(); // the claim has reached the server
    ac.abort();
    await assert.rejects(waiting, { name: "AbortError" });
    await producer.enqueue({ queue: "q", task: "t" });
    // This claim reaches the node after the aborted one (one connection,
    // in order), which took the job first.
    const jobs = await worker.claim({ queues: ["q"], waitMs: 10_000, leaseMs: 60_000 });
    assert.equal(jobs.length, 1, "the next claim gets the job");
    assert.equal(jobs[0].attempt, 1, "at its first attempt: the aborted claim's was not spent");
  });

  it("a dropped connection fails the requests in flight at once with ConnectionLostError", async () => {
    const other = await startNode();
    try {
      const t = await other.tenant();
      const worker = await connect({ servers: other.natsUrl, token: t.worker, maxReconnectAttempts: 0 });
      const started = Date.now();
      const waiting = worker.claim({ queues: ["q"], waitMs: 60_000 }).catch((e) => e);
      await worker.nc.flush();
      await other.kill();
      const err = await waiting;
      assert.ok(err instanceof UnreachableError, String(err));
      assert.ok(err.cause instanceof ConnectionLostError, String(err.cause));
      assert.ok(Date.now() - started < 10_000, "failed at once, not at its timeout");
      await worker.close();
      const closed = await worker.enqueue({ queue: "q", task: "t" }).catch((e) => e);
      assert.ok(closed instanceof UnreachableError, String(closed));
    } finally {
      await other.stop();
    }
  });

  it("connecting to no server is UnreachableError", async () => {
    const err = await connect({ servers: "nats://127.0.0.1:1", token: "x", reconnect: false }).catch((e) => e);
    assert.ok(err instanceof UnreachableError, String(err));
  });
});
