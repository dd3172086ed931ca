// The FlexiQ client: a producer (enqueue, enqueueMany, publishEvent,
// replay) and the worker calls (claim, heartbeat, ack, ackMany, nack) over
// one NATS connection. See docs/protocol.md for the wire contract.

import { createHash } from "node:crypto";
import { connect as natsConnect, errors as natsErrors, headers as natsHeaders } from "@nats-io/transport-node";

import {
  ConnectionLostError,
  FlexiQError,
  UNAUTHENTICATED_MESSAGE,
  UnreachableError,
  Codes,
  codeForHttpStatus,
} from "./errors.js";

/** The v1 subjects (docs/protocol.md "Subjects"). */
export const Subjects = Object.freeze({
  ENQUEUE: "fq.v1.enqueue",
  CLAIM: "fq.v1.claim",
  HEARTBEAT: "fq.v1.heartbeat",
  ACK: "fq.v1.ack",
  NACK: "fq.v1.nack",
  EVENT: "fq.v1.event",
  DEAD_REPLAY: "fq.v1.dead.replay",
});

/** Limits of the protocol (docs/protocol.md "Limits"). */
export const Limits = Object.freeze({
  /** Jobs in one enqueue call; ids in one replay. */
  MAX_JOBS_PER_CALL: 10000,
  /** Jobs in one claim; ids in one heartbeat; entries in one batched ack. */
  MAX_BATCH: 1000,
  /** Bytes of a job's payload, an ack's result, an event's payload. */
  MAX_PAYLOAD_BYTES: 1 << 20,
});

const HEADER_AUTHORIZATION = "Authorization";
// A clustered node that answers as the owner of the caller's namespace
// names itself in its replies (16 hex digits); the next calls go to
// fq.v1.o.<owner>.<op>, which only that node takes (docs/protocol.md
// "Going straight to the owner").
const HEADER_OWNER = "Fq-Owner";
const OWNER_TOKEN = /^[0-9a-f]{16}$/;

/**
 * The owner form of a request subject: fq.v1.o.<owner>.<op>.
 * @param {string} owner
 * @param {string} subject
 * @returns {string}
 */
export function ownerSubject(owner, subject) {
  return "fq.v1.o." + owner + "." + subject.slice("fq.v1.".length);
}
const HEADER_ERROR_CODE = "Nats-Service-Error-Code";
const HEADER_ERROR = "Nats-Service-Error";

const DEFAULT_TIMEOUT_MS = 10_000;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * The private inbox prefix of a connection made with token: `_INBOX_` and
 * the first 16 hex digits of SHA-256(token). The bus lets a connection
 * subscribe below it and nowhere else.
 * @param {string} token
 * @returns {string}
 */
export function inboxPrefix(token) {
  return "_INBOX_" + createHash("sha256").update(token, "utf8").digest("hex").slice(0, 16);
}

/**
 * The nats.js connection options of a connection made with token: its name,
 * the token as the NATS token, and the token's private inbox prefix. Use
 * them to dial a connection yourself and wrap it with `new Client(nc, token)`.
 * @param {string} token
 * @returns {{name: string, token: string, inboxPrefix: string}}
 */
export function connectOptions(token) {
  return { name: "flexiq-client", token, inboxPrefix: inboxPrefix(token) };
}

/**
 * Connects to a FlexiQ node's NATS server with a FlexiQ token.
 *
 * A token the bus refuses (unknown, revoked) rejects with a FlexiQError
 * UNAUTHENTICATED, the same refusal as a request's; a server that cannot be
 * reached rejects with an UnreachableError.
 *
 * @param {import("../index.js").ConnectOptions} options
 * @returns {Promise<Client>}
 */
export async function connect(options) {
  const { servers = "nats://127.0.0.1:4222", token, timeout, inboxPrefix: prefix, ...natsOptions } = options ?? {};
  if (typeof token !== "string" || token === "") {
    throw new TypeError("connect: token is required (a FlexiQ token is also the bus's credential)");
  }
  let nc;
  try {
    nc = await natsConnect({
      // No stack capture per request: it costs a fifth of the throughput.
      noAsyncTraces: true,
      // A worker outlives a node's restart: keep reconnecting (nats.js
      // gives up after 10 attempts by default).
      maxReconnectAttempts: -1,
      ...connectOptions(token),
      ...(prefix !== undefined ? { inboxPrefix: prefix } : {}),
      ...natsOptions,
      servers,
    });
  } catch (err) {
    if (err instanceof natsErrors.AuthorizationError) {
      // The bus admits only live tokens: the same refusal as a request's,
      // not an unreachable node.
      throw new FlexiQError({ code: Codes.UNAUTHENTICATED, reason: "", message: UNAUTHENTICATED_MESSAGE }, { cause: err });
    }
    throw new UnreachableError(`connect to NATS at ${serversLabel(servers)}: ${errorText(err)}`, { cause: err });
  }
  return new Client(nc, token, { timeout });
}

/** @param {string | string[]} servers */
function serversLabel(servers) {
  return Array.isArray(servers) ? servers.join(",") : String(servers);
}

/** @param {unknown} err */
function errorText(err) {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A FlexiQ client on one NATS connection. Every request carries
 * `Authorization: Bearer <token>`; the token decides its namespace and role.
 */
export class Client {
  /** @type {import("@nats-io/transport-node").NatsConnection} */
  #nc;
  #token;
  /** @type {number} */
  #timeout;
  /**
   * Rejecters of the requests in flight: a dropped connection fails them at
   * once (their replies cannot come) instead of letting them wait out their
   * timeout. Requests made after the drop go out on reconnection.
   * @type {Set<(err: Error) => void>}
   */
  #inflight = new Set();

  /**
   * Wraps a connection you dialled yourself (with `connectOptions(token)`,
   * or at least the token's inbox prefix). `connect()` is the usual way.
   * @param {import("@nats-io/transport-node").NatsConnection} nc
   * @param {string} token the FlexiQ token sent with every request
   * @param {{timeout?: number}} [options] `timeout`: the default request
   *   timeout in ms (10 000)
   */
  constructor(nc, token, options = {}) {
    this.#nc = nc;
    this.#token = token;
    this.#timeout = options.timeout ?? DEFAULT_TIMEOUT_MS;
    this.#watch();
  }

  async #watch() {
    try {
      for await (const s of this.#nc.status()) {
        if (s.type === "disconnect" || s.type === "close") {
          this.#dropInflight();
        }
      }
    } catch {
      // the iterator ends with the connection
    }
    this.#dropInflight();
  }

  #dropInflight() {
    const all = [...this.#inflight];
    this.#inflight.clear();
    for (const reject of all) reject(new ConnectionLostError());
  }

  /** The underlying nats.js connection. */
  get nc() {
    return this.#nc;
  }

  /** The default request timeout in ms. */
  get timeout() {
    return this.#timeout;
  }

  /** Whether the connection is closed. */
  isClosed() {
    return this.#nc.isClosed();
  }

  /**
   * Closes the connection. Requests in flight fail with an UnreachableError.
   * @returns {Promise<void>}
   */
  async close() {
    if (!this.#nc.isClosed()) await this.#nc.close();
  }

  /**
   * Resolves when the connection closes (with the error that closed it, if
   * any).
   * @returns {Promise<void | Error>}
   */
  closed() {
    return this.#nc.closed();
  }

  /**
   * Sends one request and returns the reply's decoded JSON body. `body` is
   * JSON-encoded unless it is a string or a Uint8Array (sent as is). A
   * node's refusal rejects with a FlexiQError; no answer with an
   * UnreachableError; an aborted signal with the signal's reason.
   * @param {string} subject
   * @param {unknown} body
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<any>}
   */
  async request(subject, body, options = {}) {
    return this.#call(subject, body, options);
  }

  /**
   * request, with late: given, it gets the reply of a request whose signal
   * aborted first (the request itself goes on until the node answers or
   * it times out: a node cannot tell that its caller left).
   * @param {string} subject
   * @param {unknown} body
   * @param {import("../index.js").CallOptions} options
   * @param {(msg: import("@nats-io/transport-node").Msg) => void} [late]
   * @returns {Promise<any>}
   */
  async #call(subject, body, options, late) {
    const { signal, timeout = this.#timeout } = options;
    signal?.throwIfAborted();
    const data =
      body instanceof Uint8Array ? body : encoder.encode(typeof body === "string" ? body : JSON.stringify(body));
    const max = this.#nc.info?.max_payload;
    if (max && data.length > max) {
      throw new RangeError(`${subject}: request of ${data.length} bytes exceeds the server's max_payload ${max}`);
    }
    const h = natsHeaders();
    h.set(HEADER_AUTHORIZATION, "Bearer " + this.#token);

    /** @type {import("@nats-io/transport-node").Msg} */
    let msg;
    /** @type {(err: Error) => void} */
    let dropped = () => {};
    /** @type {() => void} */
    let onAbort = () => {};
    try {
      msg = await new Promise((resolve, reject) => {
        dropped = reject;
        this.#inflight.add(dropped);
        const sent = this.#send(subject, data, { timeout, headers: h });
        if (signal) {
          onAbort = () => {
            reject(signal.reason);
            if (late) sent.then(late, () => {});
          };
          signal.addEventListener("abort", onAbort, { once: true });
        }
        sent.then(resolve, reject);
      });
    } catch (err) {
      if (signal?.aborted && err === signal.reason) throw err;
      throw new UnreachableError(`flexiq: no node answered: ${subject}: ${unreachableText(err)}`, {
        subject,
        cause: err,
      });
    } finally {
      this.#inflight.delete(dropped);
      signal?.removeEventListener("abort", onAbort);
    }
    const refusal = replyError(msg);
    if (refusal) throw refusal;
    try {
      return JSON.parse(decoder.decode(msg.data));
    } catch (err) {
      throw new Error(`decode ${subject} reply: ${errorText(err)}`, { cause: err });
    }
  }

  /** The owner the last reply named ("": none yet). */
  #owner = "";

  /**
   * Sends to the owner's subject when a reply has named it, else (or when
   * nobody listens there any more: the node is gone) to the plain subject
   * any node takes.
   * @param {string} subject
   * @param {Uint8Array} data
   * @param {{timeout: number, headers: any}} opts
   */
  async #send(subject, data, opts) {
    const owner = this.#owner;
    if (owner) {
      try {
        return this.#note(await this.#nc.request(ownerSubject(owner, subject), data, opts));
      } catch (err) {
        // Nobody took it, so nobody acted on it: send it again below.
        if (!(err instanceof natsErrors.RequestError && err.isNoResponders())) throw err;
        if (this.#owner === owner) this.#owner = "";
      }
    }
    return this.#note(await this.#nc.request(subject, data, opts));
  }

  /**
   * Keeps the owner a reply names.
   * @param {import("@nats-io/transport-node").Msg} msg
   */
  #note(msg) {
    const v = header(msg, HEADER_OWNER);
    if (OWNER_TOKEN.test(v)) this.#owner = v;
    return msg;
  }

  /**
   * Enqueues one job.
   * @param {import("../index.js").JobInput} job
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<import("../index.js").EnqueueResult>}
   */
  async enqueue(job, options) {
    const results = await this.enqueueMany([job], options);
    if (results.length !== 1) throw new Error(`enqueue: ${results.length} results for 1 job`);
    return results[0];
  }

  /**
   * Enqueues jobs as one call (at most 10 000): admitted or refused as a
   * unit. One result per job, in order.
   * @param {import("../index.js").JobInput[]} jobs
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<import("../index.js").EnqueueResult[]>}
   */
  async enqueueMany(jobs, options) {
    const reply = await this.request(Subjects.ENQUEUE, { jobs }, options);
    return reply?.results ?? [];
  }

  /**
   * Publishes an event: one job per matching trigger, admitted or refused
   * as one call. One result per trigger fired.
   * @param {string} name
   * @param {unknown} [payload]
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<import("../index.js").EnqueueResult[]>}
   */
  async publishEvent(name, payload, options) {
    const reply = await this.request(Subjects.EVENT, { name, payload }, options);
    return reply?.results ?? [];
  }

  /**
   * Sends dead letters back through admission (an admin token's call).
   * @param {string[]} ids
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<import("../index.js").EnqueueResult[]>}
   */
  async replay(ids, options) {
    const reply = await this.request(Subjects.DEAD_REPLAY, { ids }, options);
    return reply?.results ?? [];
  }

  /**
   * Claims up to `max` due jobs from `queues`, waiting up to `waitMs` for
   * one (long poll). Each comes with a lease of `leaseMs`. Without an
   * explicit `timeout`, the request waits the client's timeout plus `waitMs`.
   *
   * Aborting a claim rejects it at once, but its request goes on until the
   * node answers (a node cannot tell that its caller left): jobs that
   * answer brings are released (pending again, their attempt not spent)
   * instead of staying leased to nobody until their leases expire.
   * @param {import("../index.js").ClaimOptions} claim
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<import("../index.js").Job[]>}
   */
  async claim(claim, options = {}) {
    const { queues, max = 1, waitMs = 0, leaseMs = 30_000, worker = "" } = claim;
    const signal = options.signal ?? claim.signal;
    const timeout = options.timeout ?? claim.timeout ?? this.#timeout + waitMs;
    const reply = await this.#call(
      Subjects.CLAIM,
      { queues, max, wait_ms: waitMs, lease_ms: leaseMs, worker },
      { signal, timeout },
      (msg) => this.#releaseLate(msg),
    );
    return reply?.jobs ?? [];
  }

  /**
   * Gives back the jobs of a claim answered after its caller left. A
   * release that fails leaves the job to its lease, as before.
   * @param {import("@nats-io/transport-node").Msg} msg
   */
  #releaseLate(msg) {
    if (replyError(msg)) return;
    /** @type {import("../index.js").Job[]} */
    let jobs;
    try {
      jobs = JSON.parse(decoder.decode(msg.data))?.jobs ?? [];
    } catch {
      return;
    }
    for (const job of jobs) this.release(job).catch(() => {});
  }

  /**
   * Extends the leases of running jobs (at most 1 000 ids). Returns the ids
   * still held: a missing id has lost its lease, and its worker should stop.
   * @param {string[]} ids
   * @param {import("../index.js").HeartbeatOptions} [options]
   * @returns {Promise<string[]>}
   */
  async heartbeat(ids, options = {}) {
    const { leaseMs = 30_000, ...call } = options;
    const reply = await this.request(Subjects.HEARTBEAT, { ids, lease_ms: leaseMs }, call);
    return reply?.extended ?? [];
  }

  /**
   * Completes a running job. Given the claimed job (or `attempt`), the node
   * refuses the ack of a worker whose lease expired (LEASE_LOST) instead of
   * completing the job another worker now holds.
   * @param {string | import("../index.js").Job} job the job or its id
   * @param {import("../index.js").AckOptions} [options]
   * @returns {Promise<void>}
   */
  async ack(job, options = {}) {
    const { result, attempt, ...call } = options;
    const req = { id: jobId(job), attempt: attempt ?? jobAttempt(job), result };
    await this.request(Subjects.ACK, req, call);
  }

  /**
   * Completes several jobs in one request (at most 1 000). Each entry is
   * decided on its own: entry i's result has an `error` (a FlexiQError) when
   * that job was not completed. The promise rejects only for the request as
   * a whole (unreachable, refused).
   * @param {import("../index.js").AckItem[]} acks
   * @param {import("../index.js").CallOptions} [options]
   * @returns {Promise<import("../index.js").AckResult[]>}
   */
  async ackMany(acks, options) {
    const items = acks.map((a) => ({ id: a.id, attempt: a.attempt || undefined, result: a.result }));
    const reply = await this.request(Subjects.ACK, { acks: items }, options);
    const results = reply?.results ?? [];
    if (results.length !== acks.length) {
      throw new Error(`ack: ${results.length} results for ${acks.length} acks`);
    }
    return results.map((/** @type {{id: string, error?: any}} */ r) =>
      r.error ? { id: r.id, error: new FlexiQError(r.error) } : { id: r.id },
    );
  }

  /**
   * Gives back a job claimed and never started: pending again at once, in
   * its place in claim order, its attempt not spent (docs/protocol.md
   * "Release").
   * @param {string | import("../index.js").Job} job the job or its id
   * @param {import("../index.js").CallOptions & {attempt?: number}} [options]
   * @returns {Promise<void>}
   */
  async release(job, options = {}) {
    const { attempt, ...call } = options;
    await this.request(Subjects.NACK, { id: jobId(job), attempt: attempt ?? jobAttempt(job), release: true }, call);
  }

  /**
   * Fails a running job: it runs again after a backoff, or goes to the dead
   * letters (`retry: false`, or its attempts spent).
   * @param {string | import("../index.js").Job} job the job or its id
   * @param {import("../index.js").NackOptions} [options]
   * @returns {Promise<import("../index.js").NackResult>}
   */
  async nack(job, options = {}) {
    const { error = "", retry = true, attempt, ...call } = options;
    const req = { id: jobId(job), attempt: attempt ?? jobAttempt(job), error, retry };
    const reply = await this.request(Subjects.NACK, req, call);
    return reply?.run_at ? { status: reply.status, runAt: reply.run_at } : { status: reply?.status };
  }
}

/** @param {string | {id: string}} job */
function jobId(job) {
  return typeof job === "string" ? job : job.id;
}

/** @param {string | {attempt?: number}} job */
function jobAttempt(job) {
  return typeof job === "string" ? undefined : job.attempt || undefined;
}

/** @param {unknown} err */
function unreachableText(err) {
  if (err instanceof natsErrors.RequestError && err.isNoResponders()) return "no responders";
  if (err instanceof natsErrors.TimeoutError) return "timeout";
  return errorText(err);
}

/**
 * The refusal of a failed request: the JSON body's error when it has one,
 * else the service error headers (Go SDK: client.replyError).
 * @param {import("@nats-io/transport-node").Msg} msg
 * @returns {FlexiQError | null}
 */
export function replyError(msg) {
  const code = header(msg, HEADER_ERROR_CODE);
  if (!code) return null;
  try {
    const body = JSON.parse(decoder.decode(msg.data));
    if (body && typeof body.error === "object" && body.error && body.error.code) {
      return new FlexiQError(body.error);
    }
  } catch {
    // fall back to the headers
  }
  return new FlexiQError({ code: codeForHttpStatus(Number.parseInt(code, 10)), reason: "", message: header(msg, HEADER_ERROR) });
}

/**
 * A header's first value, its name matched without regard to case.
 * @param {import("@nats-io/transport-node").Msg} msg
 * @param {string} name
 */
function header(msg, name) {
  const h = msg.headers;
  if (!h) return "";
  const want = name.toLowerCase();
  for (const k of h.keys()) {
    if (k.toLowerCase() === want) return h.get(k);
  }
  return "";
}
