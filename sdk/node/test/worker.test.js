// The Worker against a real fq-node: draining 10 000 jobs, graceful stop,
// retries, heartbeats; and the throughput of the SDK's producer and worker.

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { FlexiQError, NonRetryableError, UnreachableError, Worker, connect } from "../src/index.js";
import { leaseDeadline } from "../src/worker.js";
import { deferred, startNode } from "./harness.js";

/** @type {Awaited<ReturnType<typeof startNode>>} */
let node;
/** @type {import("../src/index.js").Client[]} */
const clients = [];

/** @param {string} token */
async function dial(token) {
  const c = await connect({ servers: node.natsUrl, token });
  clients.push(c);
  return c;
}

/**
 * Enqueues n jobs on queue q in batches of 1000.
 * @param {import("../src/index.js").Client} producer
 * @param {number} n
 * @param {string} [q]
 */
async function fill(producer, n, q = "q") {
  for (let i = 0; i < n; i += 1000) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) jobs.push({ queue: q, task: "t", payload: { n: j } });
    await producer.enqueueMany(jobs);
  }
}

/** Fails the test on any error the worker reports. */
function noErrors(/** @type {unknown} */ err, /** @type {{op: string}} */ info) {
  throw new Error(`unexpected worker error in ${info.op}: ${err}`);
}

before(async () => {
  node = await startNode();
});

after(async () => {
  await Promise.all(clients.map((c) => c.close()));
  await node?.stop();
});

describe("Worker", () => {
  it("drains 10 000 jobs with concurrency 32, every one acked", async (t) => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    const N = 10_000;
    await fill(producer, N);
    assert.equal((await node.usage(ten.admin)).pending, N);

    const all = deferred();
    let acked = 0;
    let inFlight = 0;
    let maxInFlight = 0;
    /** @type {unknown[]} */
    const errors = [];
    const seen = new Set();
    const worker = new Worker(
      client,
      { queues: ["q"], concurrency: 32, onError: (err) => errors.push(err) },
      async (job) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        seen.add(job.payload.n);
        await null;
        inFlight--;
        return { ok: job.payload.n };
      },
    );
    worker.on("ack", (e) => {
      if (!e.error && ++acked === N) all.resolve(undefined);
    });
    // Count the ack requests: finished jobs are acked together.
    let ackRequests = 0;
    const request = client.request.bind(client);
    client.request = (subject, body, options) => {
      if (subject === "fq.v1.ack") ackRequests++;
      return request(subject, body, options);
    };
    // Timed from the start to the last ack answered; stop() then waits
    // out the claim in flight (its 1 s long poll), which is not counted.
    const started = performance.now();
    worker.start();
    await all.promise;
    const secs = (performance.now() - started) / 1000;
    await worker.stop();

    assert.deepEqual(errors, []);
    assert.equal(seen.size, N, "every job ran once");
    assert.ok(maxInFlight <= 32, `at most 32 at once, saw ${maxInFlight}`);
    assert.deepEqual(await node.usage(ten.admin), { pending: 0, running: 0, archived: N, dead: 0 });
    assert.ok(ackRequests < N / 4, `acks are batched: ${ackRequests} ack requests for ${N} jobs`);
    const rate = Math.round(N / secs);
    t.diagnostic(`drain: ${N} jobs in ${secs.toFixed(2)} s = ${rate} jobs/s (Worker, concurrency 32, ${ackRequests} ack requests)`);
    console.log(`# THROUGHPUT worker drain, concurrency 32: ${rate} jobs/s (${N} jobs in ${secs.toFixed(2)} s)`);
  });

  it("enqueue throughput: 32 concurrent producers, one job per call", async (t) => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const N = 20_000;
    let next = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < N) {
          const n = next++;
          await producer.enqueue({ queue: "q", task: "t", payload: { n } });
        }
      }),
    );
    const secs = (performance.now() - started) / 1000;
    assert.equal((await node.usage(ten.admin)).pending, N);
    const rate = Math.round(N / secs);
    t.diagnostic(`enqueue: ${N} jobs in ${secs.toFixed(2)} s = ${rate} jobs/s (32 producers, 1 job per call)`);
    console.log(`# THROUGHPUT enqueue, 32 producers, 1 job per call: ${rate} jobs/s (${N} jobs in ${secs.toFixed(2)} s)`);
  });

  it("stop() with jobs in flight lets them finish and loses none", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await fill(producer, 100);

    const gate = deferred();
    const allRunning = deferred();
    let running = 0;
    let finished = 0;
    const worker = new Worker(client, { queues: ["q"], concurrency: 8, onError: noErrors }, async (job, { signal }) => {
      if (++running === 8) allRunning.resolve(undefined);
      await gate.promise;
      assert.equal(signal.aborted, false);
      finished++;
      return job.payload.n;
    });
    worker.start();
    await allRunning.promise;
    const stopping = worker.stop({ timeout: 30_000 });
    gate.resolve(undefined);
    await stopping;

    assert.equal(finished, 8);
    assert.equal(running, 8, "no claim after stop()");
    assert.deepEqual(await node.usage(ten.admin), { pending: 92, running: 0, archived: 8, dead: 0 });
    await worker.done;
  });

  it("prefetch: jobs held ahead count as running and are released on stop, their attempt not spent", async () => {
    const ten = await node.tenant();
    const admin = await node.http("PUT", "/v1/quota", { token: ten.admin, body: { max_running: 4 } });
    assert.equal(admin.status, 200);
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await fill(producer, 6);

    const gate = deferred();
    const first = deferred();
    let started = 0;
    const worker = new Worker(client, { queues: ["q"], concurrency: 1, prefetch: 3, onError: noErrors }, async () => {
      started++;
      first.resolve(undefined);
      await gate.promise;
    });
    worker.start();
    await first.promise;
    // One running and three held ahead: max_running is reached.
    for (let i = 0; ; i++) {
      const u = await node.usage(ten.admin);
      if (u.running === 4) break;
      assert.ok(i < 400, `running ${u.running}, want 4`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const other = await dial(ten.worker);
    assert.deepEqual(await other.claim({ queues: ["q"], max: 1 }), []);

    const stopping = worker.stop({ timeout: 30_000 });
    gate.resolve(undefined);
    await stopping;
    assert.equal(started, 1);
    assert.deepEqual(await node.usage(ten.admin), { pending: 5, running: 0, archived: 1, dead: 0 });
    const jobs = await other.claim({ queues: ["q"], max: 10 });
    assert.equal(jobs.length, 4, "max_running 4");
    for (const j of jobs) assert.equal(j.attempt, 1, "a released job's attempt was not spent");
  });

  it("prefetch: a job held ahead whose lease ran out while heartbeats failed is not started", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await fill(producer, 2);
    // The node stays reachable for claims and acks; only heartbeats fail.
    client.heartbeat = async () => {
      throw new Error("heartbeat: node unreachable");
    };
    let claimed = false;
    const claim = client.claim.bind(client);
    client.claim = async (req) => {
      const jobs = await claim(req);
      if (jobs.length > 0) claimed = true;
      return jobs;
    };
    const gate = deferred();
    const beatsFailed = deferred();
    let failures = 0;
    /** @type {string[]} */
    const started = [];
    const leaseMs = 300;
    const worker = new Worker(
      client,
      {
        queues: ["q"],
        concurrency: 1,
        prefetch: 1,
        leaseMs,
        onError: (err, info) => {
          // Heartbeats go every third of the lease: four failures after the
          // claim was answered span at least the lease, so the leases are
          // over however late a loaded machine ran the claim.
          if (info.op === "heartbeat" && claimed && ++failures === 4) beatsFailed.resolve(undefined);
        },
      },
      async (job) => {
        started.push(`${job.id}@${job.attempt}`);
        if (started.length === 1) await gate.promise;
      },
    );
    const acked = deferred();
    worker.on("ack", () => acked.resolve(undefined));
    worker.start();
    await beatsFailed.promise;
    gate.resolve(undefined);
    await acked.promise; // the first job's slot is free again
    await worker.stop({ timeout: 30_000 });
    // The second job may run again later, claimed anew once the node has
    // expired its lease; never under the lease this worker lost.
    const second = started.slice(1).filter((s) => s.endsWith("@1"));
    assert.deepEqual(second, [], `started ${started.join(", ")}: a job held ahead ran under a lease already over`);
  });

  it("prefetch: a job a long poll handed out more than a lease after the claim was sent is started", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    const leaseMs = 300;
    await producer.enqueue({ id: "a", queue: "q", task: "t" });
    // b comes due twice the lease after its claim, which long-polls for it.
    await producer.enqueue({ id: "b", queue: "q", task: "t", run_at: new Date(Date.now() + 2 * leaseMs) });
    const bClaimed = deferred();
    const claim = client.claim.bind(client);
    client.claim = async (req) => {
      const jobs = await claim(req);
      if (jobs.some((j) => j.id === "b")) bClaimed.resolve(undefined);
      return jobs;
    };
    /** @type {string[]} */
    const started = [];
    const bStarted = deferred();
    const worker = new Worker(
      client,
      { queues: ["q"], concurrency: 1, prefetch: 1, leaseMs, waitMs: 5 * leaseMs, onError: noErrors },
      async (job) => {
        started.push(`${job.id}@${job.attempt}`);
        if (job.id === "b") bStarted.resolve(undefined);
        if (job.id !== "a") return;
        // a holds the slot until b is claimed and held ahead of it.
        await bClaimed.promise;
        await new Promise((resolve) => setImmediate(resolve));
      },
    );
    worker.start();
    let timer;
    const timedOut = new Promise((resolve) => (timer = setTimeout(resolve, 10_000, "timeout")));
    const outcome = await Promise.race([bStarted.promise, timedOut]);
    clearTimeout(timer);
    await worker.stop({ timeout: 30_000 });
    assert.notEqual(outcome, "timeout", `started ${started.join(", ")}: b never started`);
    assert.deepEqual(started, ["a@1", "b@1"], "b, held ahead under a lease just begun, starts under it");
  });

  it("leaseDeadline reads the node's lease_until between the claim's sending and its answer", () => {
    const sent = 1_000_000;
    const recv = sent + 3_000; // a long poll
    const lease = 10_000;
    const at = (/** @type {number} */ ms) => new Date(ms).toISOString();
    assert.equal(leaseDeadline({ id: "x" }, sent, recv, lease), sent + lease, "no lease_until");
    assert.equal(leaseDeadline({ id: "x", lease_until: at(sent + 2_000 + lease) }, sent, recv, lease), sent + 2_000 + lease);
    assert.equal(leaseDeadline({ id: "x", lease_until: at(sent + 3_600_000) }, sent, recv, lease), recv + lease, "node's clock ahead");
    assert.equal(leaseDeadline({ id: "x", lease_until: at(sent - 3_600_000) }, sent, recv, lease), sent + lease, "node's clock behind");
  });

  it("stop()'s deadline aborts a handler that does not finish and gives its job back", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await producer.enqueue({ id: "slow", queue: "q", task: "t" });

    const started = deferred();
    const aborted = deferred();
    const worker = new Worker(client, { queues: ["q"], onError: noErrors }, async (_job, { signal }) => {
      started.resolve(undefined);
      signal.addEventListener("abort", () => aborted.resolve(signal.reason));
      await new Promise(() => {}); // never finishes
    });
    /** @type {import("../index.js").NackEvent[]} */
    const nacks = [];
    worker.on("nack", (e) => nacks.push(e));
    worker.start();
    await started.promise;
    await worker.stop({ timeout: 100 });

    assert.match(String(await aborted.promise), /worker stopped/);
    assert.equal(nacks.length, 1);
    assert.equal(nacks[0].status, "pending");
    const job = await node.http("GET", "/v1/jobs/slow", { token: ten.admin });
    assert.equal(job.body.status, "pending");
    assert.equal(job.body.attempt, 1);
    assert.match(job.body.error, /worker stopped/);
  });

  it("a throw nacks for a retry; a NonRetryableError sends the job to the dead letters", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await producer.enqueueMany([
      { id: "flaky", queue: "q", task: "t" },
      { id: "broken", queue: "q", task: "t" },
    ]);
    const both = deferred();
    /** @type {Record<string, import("../index.js").NackEvent>} */
    const nacks = {};
    const worker = new Worker(client, { queues: ["q"], concurrency: 2, onError: noErrors }, async (job) => {
      if (job.id === "flaky") throw new Error("try again");
      throw new NonRetryableError("bad input");
    });
    worker.on("nack", (e) => {
      nacks[e.id] = e;
      if (Object.keys(nacks).length === 2) both.resolve(undefined);
    });
    worker.start();
    await both.promise;
    await worker.stop();

    assert.equal(nacks.flaky.retry, true);
    assert.equal(nacks.flaky.status, "pending");
    assert.equal(nacks.broken.retry, false);
    assert.equal(nacks.broken.status, "dead");
    const broken = await node.http("GET", "/v1/jobs/broken", { token: ten.admin });
    assert.equal(broken.body.status, "dead");
    assert.equal(broken.body.error, "bad input");
    const flaky = await node.http("GET", "/v1/jobs/flaky", { token: ten.admin });
    assert.equal(flaky.body.status, "pending");
    assert.equal(flaky.body.error, "try again");
  });

  it("heartbeats keep a job that runs past its lease", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await producer.enqueue({ id: "long", queue: "q", task: "t" });

    // A 300 ms lease, heartbeats every 100 ms: hold the job through 15 of
    // them (1.5 s, longer than the lease plus the second the node takes to
    // notice an expired one).
    const acked = deferred();
    let beats = 0;
    const enough = deferred();
    const worker = new Worker(client, { queues: ["q"], leaseMs: 300, onError: noErrors }, async (_job, { signal }) => {
      await enough.promise;
      assert.equal(signal.aborted, false);
      return "done";
    });
    /** @type {string[][]} */
    const extended = [];
    worker.on("heartbeat", (e) => {
      extended.push(e.extended);
      if (++beats === 15) enough.resolve(undefined);
    });
    worker.on("ack", (e) => acked.resolve(e));
    worker.start();
    const ack = await acked.promise;
    await worker.stop();

    assert.deepEqual(ack, { id: "long", attempt: 1 });
    assert.ok(extended.length >= 15);
    assert.ok(
      extended.every((ids) => ids.length === 1 && ids[0] === "long"),
      JSON.stringify(extended),
    );
    const job = await node.http("GET", "/v1/jobs/long", { token: ten.admin });
    assert.equal(job.body.status, "completed");
    assert.equal(job.body.attempt, 1, "never handed to another worker");
    assert.equal(job.body.result, "done");
  });

  it("a lost lease aborts the handler's signal with LEASE_LOST; the job runs again", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await producer.enqueue({ id: "stalled", queue: "q", task: "t" });

    // The heartbeats of the first run are lost (a partition) until its
    // 300 ms lease has run out; the next one reaches the node, which does
    // not revive an expired lease.
    let leaseUntil = Infinity;
    const heartbeat = client.heartbeat.bind(client);
    client.heartbeat = async (ids, options) => {
      if (Date.now() <= leaseUntil) throw new UnreachableError("heartbeat lost (simulated partition)");
      return heartbeat(ids, options);
    };
    const lost = deferred();
    const done = deferred();
    /** @type {{op: string}[]} */
    const errors = [];
    const worker = new Worker(
      client,
      { queues: ["q"], leaseMs: 300, onError: (_err, info) => errors.push(info) },
      async (job, { signal }) => {
        if (job.attempt === 1) {
          leaseUntil = Date.parse(job.lease_until ?? "") + 5;
          await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
          lost.resolve(signal.reason);
          return "too late";
        }
        return "second run";
      },
    );
    worker.on("ack", (e) => done.resolve(e));
    worker.start();
    const reason = await lost.promise;
    assert.ok(reason instanceof FlexiQError, String(reason));
    assert.equal(reason.code, "ABORTED");
    assert.equal(reason.reason, "LEASE_LOST");
    // The node expires the lease (a failed attempt) and retries after ~1 s.
    assert.deepEqual(await done.promise, { id: "stalled", attempt: 2 });
    await worker.stop();
    assert.ok(errors.length > 0 && errors.every((e) => e.op === "heartbeat"), JSON.stringify(errors));
    const job = await node.http("GET", "/v1/jobs/stalled", { token: ten.admin });
    assert.equal(job.body.status, "completed");
    assert.equal(job.body.attempt, 2);
    assert.equal(job.body.result, "second run", "the first run's result is never acked");
  });

  it("run({signal}) stops when the signal aborts", async () => {
    const ten = await node.tenant();
    const producer = await dial(ten.producer);
    const client = await dial(ten.worker);
    await fill(producer, 10);
    const ac = new AbortController();
    let handled = 0;
    const worker = new Worker(client, { queues: ["q"], concurrency: 4, onError: noErrors }, async () => {
      if (++handled === 10) ac.abort();
    });
    await worker.run({ signal: ac.signal });
    assert.deepEqual(await node.usage(ten.admin), { pending: 0, running: 0, archived: 10, dead: 0 });
  });
});
