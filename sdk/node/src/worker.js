// The FlexiQ Worker: claims jobs for its free slots, runs them through a
// handler, heartbeats their leases, acks finished jobs in batches and nacks
// failed ones; stop() drains it gracefully.

import { EventEmitter } from "node:events";

import { Limits, Subjects } from "./client.js";
import { FlexiQError, Codes, Reasons } from "./errors.js";

/** How long a worker waits after a failed claim before the next one. */
const CLAIM_RETRY_MS = 500;
/** Bytes an ack request may hold, well below the bus's 16 MiB messages. */
const MAX_ACK_BYTES = 8 << 20;
/** The nack error of a job given back at stop()'s deadline. */
const STOPPED_MESSAGE = "worker stopped: the handler did not finish within the stop timeout";

/**
 * A worker: up to `concurrency` jobs of `queues` at once.
 *
 * The handler gets the job and `{signal}`; what it returns (any JSON value,
 * or undefined) is the job's result and the job is acked; if it throws, the
 * job is nacked, retried after a backoff unless the error is a
 * NonRetryableError (or has `retry === false`). A job's slot frees when its
 * handler settles; acks go out in the background, everything that finished
 * meanwhile in one request.
 *
 * The signal aborts when the job's lease is lost (a heartbeat did not
 * extend it: another worker may run it now) or when `stop()`'s deadline
 * passes; the handler should then give up. Its result is not acked.
 *
 * Events: `ack` ({id, attempt, error?}) once a job's ack is answered,
 * `nack` ({id, attempt, error, retry, status?, runAt?, nackError?}) once a
 * nack is answered, `heartbeat` ({ids, extended}) after each heartbeat.
 * Failures of the worker's own requests go to the `onError` option.
 */
export class Worker extends EventEmitter {
  #client;
  #handler;
  #queues;
  #concurrency;
  #prefetch;
  #leaseMs;
  #waitMs;
  #name;
  #onError;

  /** "new" | "running" | "stopping" | "stopped" */
  #state = "new";
  /** Jobs the worker may still take: concurrency + prefetch, less those it holds. */
  #free = 0;
  /** Handlers running. */
  #active = 0;
  /**
   * Jobs claimed ahead of a free slot, not started (prefetch): leased and
   * heartbeated like running ones, released if the worker stops first.
   * @type {import("../index.js").Job[]}
   */
  #waiting = [];
  /**
   * When the lease of a job held ahead runs out by this worker's clock:
   * when the node handed it out (leaseDeadline), or the last heartbeat that
   * extended it was sent, plus the lease. Past it the node may have given
   * the job to another worker.
   * @type {WeakMap<import("../index.js").Job, number>}
   */
  #heldUntil = new WeakMap();
  /** Woken whenever a slot frees or the worker stops. @type {(() => void)[]} */
  #slotWaiters = [];
  /** @type {Map<string, {job: import("../index.js").Job, ac: AbortController, abandoned: boolean}>} */
  #running = new Map();
  /** Handler runs that have not settled. @type {Set<Promise<void>>} */
  #tasks = new Set();
  /** Nacks in flight. @type {Set<Promise<void>>} */
  #nacks = new Set();
  /** Acks waiting to be sent, each as its JSON entry. @type {{id: string, attempt: number, json: string}[]} */
  #acks = [];
  /** @type {Promise<void> | null} */
  #acker = null;
  /** @type {Promise<void>[]} */
  #claimers = [];
  /** @type {ReturnType<typeof setInterval> | null} */
  #heartbeatTimer = null;
  #heartbeating = false;
  #stopAC = new AbortController();
  #deadlinePassed = false;
  /** @type {Promise<void> | null} */
  #stopped = null;
  /** @type {() => void} */
  #resolveDone = () => {};
  /** @type {Promise<void>} */
  #done = new Promise((resolve) => {
    this.#resolveDone = () => resolve();
  });

  /**
   * @param {import("./client.js").Client} client
   * @param {import("../index.js").WorkerOptions} options
   * @param {import("../index.js").Handler} handler
   */
  constructor(client, options, handler) {
    super();
    if (typeof handler !== "function") throw new TypeError("Worker: handler must be a function");
    const { queues, concurrency = 1, prefetch = 0, leaseMs = 30_000, waitMs = 1000, name = "", onError } = options ?? {};
    if (!Array.isArray(queues) || queues.length === 0) throw new TypeError("Worker: queues must name at least one queue");
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new TypeError("Worker: concurrency must be an integer >= 1");
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > Limits.MAX_BATCH) {
      throw new TypeError(`Worker: prefetch must be an integer from 0 to ${Limits.MAX_BATCH}`);
    }
    if (!(leaseMs >= 3)) throw new TypeError("Worker: leaseMs must be at least 3");
    this.#client = client;
    this.#handler = handler;
    this.#queues = [...queues];
    this.#concurrency = concurrency;
    this.#prefetch = prefetch;
    this.#leaseMs = leaseMs;
    this.#waitMs = waitMs;
    this.#name = name;
    this.#onError =
      onError ??
      ((/** @type {unknown} */ err, /** @type {{op: string, job?: string}} */ info) => {
        console.error(`flexiq worker: ${info.op} failed:`, err);
      });
  }

  /** Jobs whose handler is running. */
  get running() {
    return this.#running.size;
  }

  /** Resolves once the worker has stopped and its acks are answered. */
  get done() {
    return this.#done;
  }

  /**
   * Starts claiming and running jobs; returns the worker.
   * @returns {this}
   */
  start() {
    if (this.#state !== "new") throw new Error(`Worker: cannot start a worker that is ${this.#state}`);
    this.#state = "running";
    this.#free = this.#concurrency + this.#prefetch;
    this.#heartbeatTimer = setInterval(() => this.#heartbeat(), Math.max(1, Math.floor(this.#leaseMs / 3)));
    // Two claims may be in flight at once, so slots that free while one
    // waits for its reply are claimed by the other instead of idling;
    // three for 64 or more (the Go SDK's worker does the same).
    const tokens = this.#concurrency + this.#prefetch;
    const claimers = tokens >= 64 ? 3 : tokens >= 4 ? 2 : 1;
    for (let i = 0; i < claimers; i++) this.#claimers.push(this.#claimLoop());
    return this;
  }

  /**
   * Starts the worker and runs it until `signal` aborts (or `stop()` is
   * called), then stops it gracefully. Resolves once stopped.
   * @param {{signal?: AbortSignal, stopTimeout?: number}} [options]
   * @returns {Promise<void>}
   */
  async run(options = {}) {
    const { signal, stopTimeout } = options;
    if (this.#state === "new") this.start();
    if (signal) {
      const onAbort = () => void this.stop({ timeout: stopTimeout });
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
      this.#done.finally(() => signal.removeEventListener("abort", onAbort));
    }
    return this.#done;
  }

  /**
   * Stops gracefully: no new claims (a claim in flight still returns, within
   * `waitMs`, and its jobs run), running handlers may finish until
   * `timeout` ms from now (default 30 000), then their signals abort and
   * their jobs are nacked to run again; every ack is sent and answered.
   * Resolves when all of that is done.
   * @param {{timeout?: number}} [options]
   * @returns {Promise<void>}
   */
  stop(options = {}) {
    if (this.#stopped) return this.#stopped;
    const { timeout = 30_000 } = options;
    if (this.#state === "new") {
      this.#state = "stopped";
      this.#resolveDone();
      this.#stopped = Promise.resolve();
      return this.#stopped;
    }
    this.#state = "stopping";
    this.#stopAC.abort();
    this.#releaseWaiting();
    this.#wakeSlotWaiters();
    this.#stopped = this.#drain(timeout);
    return this.#stopped;
  }

  /** @param {number} timeout */
  async #drain(timeout) {
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer;
    const deadline = new Promise((resolve) => {
      timer = setTimeout(resolve, timeout, "deadline");
    });
    try {
      // A claim in flight ends within its long poll; its jobs start.
      let r = await Promise.race([Promise.all(this.#claimers), deadline]);
      while (r !== "deadline" && this.#tasks.size > 0) {
        r = await Promise.race([Promise.allSettled([...this.#tasks]), deadline]);
      }
      if (r === "deadline") {
        this.#deadlinePassed = true;
        this.#abandonRunning();
      }
    } finally {
      clearTimeout(timer);
    }
    if (this.#heartbeatTimer) clearInterval(this.#heartbeatTimer);
    this.#heartbeatTimer = null;
    while (this.#nacks.size > 0) await Promise.allSettled([...this.#nacks]);
    while (this.#acker || this.#acks.length > 0) {
      this.#kickAcker();
      await this.#acker;
    }
    this.#state = "stopped";
    this.#resolveDone();
  }

  /** At the stop deadline: abort the handlers still running and nack their jobs. */
  #abandonRunning() {
    for (const entry of this.#running.values()) {
      if (entry.abandoned) continue;
      entry.abandoned = true;
      entry.ac.abort(new Error(STOPPED_MESSAGE));
      this.#nack(entry.job, STOPPED_MESSAGE, true);
    }
  }

  #wakeSlotWaiters() {
    const waiters = this.#slotWaiters;
    this.#slotWaiters = [];
    for (const w of waiters) w();
  }

  /** Resolves when a slot is free or the worker stops. */
  #waitSlot() {
    if (this.#free > 0 || this.#state !== "running") return Promise.resolve();
    return new Promise((resolve) => this.#slotWaiters.push(() => resolve(undefined)));
  }

  /**
   * A handler settled: its slot takes the next job held ahead, if any,
   * skipping those whose lease ran out while they waited (heartbeats
   * failing): not ours to start.
   */
  #release() {
    this.#active--;
    this.#free++;
    let next;
    while (this.#state === "running" && (next = this.#waiting.shift())) {
      if ((this.#heldUntil.get(next) ?? Infinity) > Date.now()) break;
      this.#free++; // its token is free again
      next = undefined;
    }
    if (next) {
      this.#free--; // the token moves from the ended job to the next
      this.#startJob(next);
    }
    this.#wakeSlotWaiters();
  }

  /**
   * Starts a claimed job in a free slot, or holds it until one frees
   * (prefetch); once the worker stops, a job with no free slot is given back.
   * @param {import("../index.js").Job} job
   */
  #admit(job) {
    if (this.#active < this.#concurrency) {
      this.#startJob(job);
    } else if (this.#state === "running") {
      this.#waiting.push(job);
    } else {
      this.#giveBack(job);
    }
  }

  /** Gives back every job held ahead and not started. */
  #releaseWaiting() {
    const jobs = this.#waiting;
    this.#waiting = [];
    for (const job of jobs) this.#giveBack(job);
  }

  /**
   * Releases a job never started: pending again, its attempt not spent.
   * @param {import("../index.js").Job} job
   */
  #giveBack(job) {
    this.#free++;
    const p = (async () => {
      try {
        await this.#client.release(job);
      } catch (err) {
        // Its lease runs out and it runs again: a failed attempt.
        this.#report(err, { op: "nack", job: job.id });
      }
    })();
    this.#nacks.add(p);
    const done = () => void this.#nacks.delete(p);
    p.then(done, done);
  }

  async #claimLoop() {
    while (this.#state === "running") {
      await this.#waitSlot();
      if (this.#state !== "running") return;
      // Take every free slot; the other claimer may have taken them first.
      const n = this.#free;
      if (n === 0) continue;
      this.#free = 0;
      /** @type {import("../index.js").Job[]} */
      let jobs;
      const sent = Date.now();
      try {
        jobs = await this.#client.claim({
          queues: this.#queues,
          max: Math.min(n, Limits.MAX_BATCH),
          waitMs: this.#waitMs,
          leaseMs: this.#leaseMs,
          worker: this.#name,
        });
      } catch (err) {
        this.#free += n;
        this.#wakeSlotWaiters();
        this.#report(err, { op: "claim" });
        if (this.#client.isClosed()) {
          // The connection cannot come back: stop instead of spinning.
          void this.stop();
          return;
        }
        await delay(CLAIM_RETRY_MS, this.#stopAC.signal);
        continue;
      }
      if (this.#deadlinePassed) {
        // A claim that outlived stop()'s deadline: give its jobs back.
        for (const job of jobs) this.#nack(job, STOPPED_MESSAGE, true);
        return;
      }
      const recv = Date.now();
      this.#free += n - jobs.length;
      if (jobs.length < n) this.#wakeSlotWaiters();
      for (const job of jobs) {
        this.#heldUntil.set(job, leaseDeadline(job, sent, recv, this.#leaseMs));
        this.#admit(job);
      }
    }
  }

  /** @param {import("../index.js").Job} job */
  #startJob(job) {
    this.#active++;
    const entry = { job, ac: new AbortController(), abandoned: false };
    this.#running.set(job.id, entry);
    const task = this.#runJob(entry);
    this.#tasks.add(task);
    const done = () => void this.#tasks.delete(task);
    task.then(done, done);
  }

  /** @param {{job: import("../index.js").Job, ac: AbortController, abandoned: boolean}} entry */
  async #runJob(entry) {
    const { job } = entry;
    /** @type {unknown} */
    let result;
    /** @type {unknown} */
    let failure;
    let failed = false;
    try {
      result = await this.#handler(job, { signal: entry.ac.signal });
    } catch (err) {
      failed = true;
      failure = err;
    }
    if (this.#running.get(job.id) === entry) this.#running.delete(job.id);
    if (entry.abandoned) {
      // Nacked at the stop deadline, or its lease is lost: nothing to send.
      this.#release();
      return;
    }
    entry.abandoned = true;
    if (!failed) {
      /** @type {string | undefined} */
      let json;
      try {
        json = result === undefined ? undefined : JSON.stringify(result);
      } catch (err) {
        failed = true;
        failure = new Error(`result is not JSON: ${errorText(err)}`, { cause: err });
        retryOf(failure, false);
      }
      if (!failed && json !== undefined && Buffer.byteLength(json) > Limits.MAX_PAYLOAD_BYTES) {
        failed = true;
        failure = new Error(`result: must be at most ${Limits.MAX_PAYLOAD_BYTES} bytes, got ${Buffer.byteLength(json)}`);
        retryOf(failure, false);
      }
      if (!failed) {
        this.#queueAck(job, json);
        this.#release();
        return;
      }
    }
    const retry = !(failure !== null && typeof failure === "object" && /** @type {any} */ (failure).retry === false);
    await this.#nack(job, errorText(failure), retry);
    this.#release();
  }

  /**
   * @param {import("../index.js").Job} job
   * @param {string} error
   * @param {boolean} retry
   */
  #nack(job, error, retry) {
    const p = (async () => {
      try {
        const r = await this.#client.nack(job, { error, retry });
        this.#emit("nack", { id: job.id, attempt: job.attempt, error, retry, ...r });
      } catch (err) {
        this.#report(err, { op: "nack", job: job.id });
        this.#emit("nack", { id: job.id, attempt: job.attempt, error, retry, nackError: err });
      }
    })();
    this.#nacks.add(p);
    const done = () => void this.#nacks.delete(p);
    p.then(done, done);
    return p;
  }

  /**
   * @param {import("../index.js").Job} job
   * @param {string | undefined} resultJSON
   */
  #queueAck(job, resultJSON) {
    let json = `{"id":${JSON.stringify(job.id)}`;
    if (job.attempt) json += `,"attempt":${job.attempt}`;
    if (resultJSON !== undefined) json += `,"result":${resultJSON}`;
    json += "}";
    this.#acks.push({ id: job.id, attempt: job.attempt, json });
    this.#kickAcker();
  }

  #kickAcker() {
    if (this.#acker || this.#acks.length === 0) return;
    this.#acker = (async () => {
      try {
        // Let the jobs that finish in this turn of the event loop join the
        // first request.
        await new Promise((resolve) => setImmediate(resolve));
        while (this.#acks.length > 0) {
          let bytes = 0;
          let n = 0;
          while (n < this.#acks.length && n < Limits.MAX_BATCH) {
            const size = this.#acks[n].json.length + 1;
            if (n > 0 && bytes + size > MAX_ACK_BYTES) break;
            bytes += size;
            n++;
          }
          const batch = this.#acks.splice(0, n);
          await this.#sendAcks(batch);
        }
      } finally {
        this.#acker = null;
      }
    })();
  }

  /** @param {{id: string, attempt: number, json: string}[]} batch */
  async #sendAcks(batch) {
    // One ack alone goes in the plain form.
    const body = batch.length === 1 ? batch[0].json : `{"acks":[${batch.map((a) => a.json).join(",")}]}`;
    /** @type {any} */
    let reply;
    try {
      reply = await this.#client.request(Subjects.ACK, body);
    } catch (err) {
      // The jobs run again once their leases expire.
      this.#report(err, { op: "ack", job: batch[0].id, jobs: batch.map((a) => a.id) });
      for (const a of batch) this.#emit("ack", { id: a.id, attempt: a.attempt, error: err });
      return;
    }
      if (batch.length === 1) {
        this.#emit("ack", { id: batch[0].id, attempt: batch[0].attempt });
        return;
      }
      const results = reply?.results ?? [];
      batch.forEach((a, i) => {
        const r = results[i];
        const error = r?.error ? new FlexiQError(r.error) : r ? undefined : new Error("ack: no result for this entry");
        if (error) this.#report(error, { op: "ack", job: a.id });
        this.#emit("ack", error ? { id: a.id, attempt: a.attempt, error } : { id: a.id, attempt: a.attempt });
      });
  }

  async #heartbeat() {
    if (this.#heartbeating || (this.#running.size === 0 && this.#waiting.length === 0)) return;
    this.#heartbeating = true;
    try {
      /** @type {Map<string, import("../index.js").Job>} */
      const sent = new Map();
      for (const [id, e] of this.#running) if (!e.abandoned) sent.set(id, e.job);
      for (const job of this.#waiting) sent.set(job.id, job);
      const ids = [...sent.keys()];
      for (let i = 0; i < ids.length; i += Limits.MAX_BATCH) {
        const chunk = ids.slice(i, i + Limits.MAX_BATCH);
        let extended;
        const sentAt = Date.now();
        try {
          extended = await this.#client.heartbeat(chunk, { leaseMs: this.#leaseMs });
        } catch (err) {
          this.#report(err, { op: "heartbeat" });
          continue;
        }
        const kept = new Set(extended);
        for (const id of chunk) {
          if (kept.has(id)) {
            const job = sent.get(id);
            if (job) this.#heldUntil.set(job, sentAt + this.#leaseMs);
            continue;
          }
          const w = this.#waiting.findIndex((j) => j.id === id && j === sent.get(id));
          if (w >= 0) {
            // Held ahead and its lease is gone: not ours to start.
            this.#waiting.splice(w, 1);
            this.#free++;
            this.#wakeSlotWaiters();
            continue;
          }
          const e = this.#running.get(id);
          if (!e || e.abandoned || e.job !== sent.get(id)) continue;
          // The lease is gone: another worker may hold the job now.
          e.abandoned = true;
          e.ac.abort(
            new FlexiQError({
              code: Codes.ABORTED,
              reason: Reasons.LEASE_LOST,
              message: `job '${id}' is not running under this lease`,
            }),
          );
        }
        this.#emit("heartbeat", { ids: chunk, extended });
      }
    } finally {
      this.#heartbeating = false;
    }
  }

  /**
   * Emits an event; a listener that throws is reported to onError (op
   * "listener") instead of breaking the worker's own bookkeeping.
   * @param {string} event
   * @param {unknown} payload
   */
  #emit(event, payload) {
    try {
      this.emit(event, payload);
    } catch (err) {
      this.#report(err, { op: "listener" });
    }
  }

  /**
   * @param {unknown} err
   * @param {{op: "claim" | "heartbeat" | "ack" | "nack" | "listener", job?: string, jobs?: string[]}} info
   */
  #report(err, info) {
    try {
      this.#onError(err, info);
    } catch {
      // a throwing onError must not stop the worker
    }
  }
}

/**
 * @param {unknown} err
 * @param {boolean} retry
 */
function retryOf(err, retry) {
  /** @type {any} */ (err).retry = retry;
}

/** @param {unknown} err */
function errorText(err) {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/**
 * Resolves after ms, or at once when signal aborts.
 * @param {number} ms
 * @param {AbortSignal} signal
 */
function delay(ms, signal) {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(undefined);
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve(undefined);
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/**
 * When the lease of a job claimed by a request sent at `sent` and answered
 * at `recv` runs out, by this worker's clock (ms). The node starts the
 * lease when it hands the job out: at once, or later in a long poll, when
 * a job comes due (possibly more than a lease after `sent`). It says when
 * in `lease_until`, by its own clock; read as this worker's, the start is
 * kept between `sent` and `recv`, so a clock ahead or behind the node's
 * moves the deadline by at most the claim's round trip. Without
 * `lease_until` it is `sent` plus the lease.
 * @param {import("../index.js").Job} job
 * @param {number} sent @param {number} recv @param {number} leaseMs
 * @returns {number}
 */
export function leaseDeadline(job, sent, recv, leaseMs) {
  const until = job.lease_until === undefined ? NaN : Date.parse(job.lease_until);
  const start = Number.isNaN(until) ? sent : Math.min(Math.max(until - leaseMs, sent), recv);
  return start + leaseMs;
}
