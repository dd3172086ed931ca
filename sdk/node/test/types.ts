// Compiled by `tsc` (npm test): the declarations in index.d.ts describe
// what a TypeScript user writes. Not run.

import {
  Client,
  Codes,
  FlexiQError,
  NonRetryableError,
  Reasons,
  UnreachableError,
  Worker,
  connect,
  inboxPrefix,
  type EnqueueResult,
  type Job,
} from "@flexiq/client";

export async function producer(): Promise<EnqueueResult[]> {
  const client: Client = await connect({ servers: "nats://127.0.0.1:4222", token: "fq_…", timeout: 5000 });
  const one: EnqueueResult = await client.enqueue(
    { queue: "emails", task: "send", payload: { to: "a@example.com" }, run_at: new Date(), unique_key: "k" },
    { signal: AbortSignal.timeout(1000) },
  );
  try {
    return [one, ...(await client.enqueueMany([{ queue: "q", task: "t", delay_ms: 500 }]))];
  } catch (err) {
    if (err instanceof FlexiQError && err.code === Codes.RESOURCE_EXHAUSTED && err.reason === Reasons.QUEUE_FULL) {
      return [];
    }
    if (err instanceof UnreachableError) throw new Error(`no node: ${err.subject}`, { cause: err });
    throw err;
  } finally {
    await client.close();
  }
}

export async function worker(client: Client): Promise<void> {
  const w = new Worker(client, { queues: ["emails"], concurrency: 32, leaseMs: 30_000 }, async (job: Job, { signal }) => {
    if (signal.aborted) throw new NonRetryableError("gone");
    return { sent: job.payload.to as string };
  });
  w.on("ack", (e) => e.error && console.error(e.id, e.error));
  w.on("nack", (e) => console.error(e.id, e.status));
  w.start();
  await w.stop({ timeout: 10_000 });
  const jobs = await client.claim({ queues: ["q"], max: 10, waitMs: 1000 });
  for (const j of jobs) await client.ack(j, { result: j.attempt });
  const results = await client.ackMany(jobs.map((j) => ({ id: j.id, attempt: j.attempt })));
  results.forEach((r) => r.error?.reason);
  await client.nack("id", { error: "x", retry: false });
  await client.heartbeat(["id"], { leaseMs: 1000 });
  await client.publishEvent("order.created", { id: 1 });
  await client.replay(["id"]);
  inboxPrefix("t").startsWith("_INBOX_");
}
