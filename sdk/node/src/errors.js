// Errors of the FlexiQ Node.js SDK.
//
// A node's refusal is a FlexiQError carrying the code, reason and message
// every other client (Go, gRPC, HTTP, the fq CLI) sees for the same
// situation. Failing to reach any node is an UnreachableError: whether a
// node acted on the request is then unknown.

/**
 * The gRPC canonical code names FlexiQ uses (docs/protocol.md "Errors").
 * @readonly
 */
export const Codes = Object.freeze({
  INVALID_ARGUMENT: "INVALID_ARGUMENT",
  FAILED_PRECONDITION: "FAILED_PRECONDITION",
  UNAUTHENTICATED: "UNAUTHENTICATED",
  PERMISSION_DENIED: "PERMISSION_DENIED",
  NOT_FOUND: "NOT_FOUND",
  ALREADY_EXISTS: "ALREADY_EXISTS",
  ABORTED: "ABORTED",
  RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED",
  INTERNAL: "INTERNAL",
  UNAVAILABLE: "UNAVAILABLE",
});

/**
 * The reasons that refine a code. A refusal may also have the empty reason.
 * @readonly
 */
export const Reasons = Object.freeze({
  QUEUE_FULL: "QUEUE_FULL",
  RATE_LIMITED: "RATE_LIMITED",
  QUOTA_UNREADABLE: "QUOTA_UNREADABLE",
  INVALID_QUOTA: "INVALID_QUOTA",
  BAD_REQUEST: "BAD_REQUEST",
  UNKNOWN_JOB: "UNKNOWN_JOB",
  LEASE_LOST: "LEASE_LOST",
});

/** The message of a refused token, on every surface (Go: api.Unauthenticated). */
export const UNAUTHENTICATED_MESSAGE = "missing or invalid token: send Authorization: Bearer <token>";

/**
 * A FlexiQ node refused the request.
 *
 * `code` is a gRPC canonical code name (`RESOURCE_EXHAUSTED`, …), `reason`
 * refines it (`QUEUE_FULL`, …, or `""`), and `message` is the node's message
 * exactly as every other client shows it.
 */
export class FlexiQError extends Error {
  /**
   * @param {{code: string, reason?: string, message: string}} body the
   *   `error` object of the reply body
   * @param {ErrorOptions} [options]
   */
  constructor(body, options) {
    super(body.message, options);
    this.name = "FlexiQError";
    /** @type {string} */
    this.code = body.code;
    /** @type {string} */
    this.reason = body.reason ?? "";
  }

  /** The error as the protocol's JSON error object. */
  toJSON() {
    return { code: this.code, reason: this.reason, message: this.message };
  }
}

/**
 * No node answered: no responders, a timeout, or the connection dropped or
 * closed before the reply. `cause` says which (a ConnectionLostError when
 * the connection dropped). As after any timeout, whether a node acted on the
 * request is unknown; an enqueue retried with the same `unique_key` (or the
 * same `id`) is deduplicated.
 */
export class UnreachableError extends Error {
  /**
   * @param {string} message
   * @param {{subject?: string, cause?: unknown}} [options]
   */
  constructor(message, options = {}) {
    super(message, { cause: options.cause });
    this.name = "UnreachableError";
    /** @type {string | undefined} the subject of the request, if any */
    this.subject = options.subject;
  }
}

/**
 * The cause of an UnreachableError for a request that was in flight when the
 * connection to NATS dropped: its reply cannot come, so it fails at once
 * instead of waiting out its timeout.
 */
export class ConnectionLostError extends Error {
  constructor() {
    super("connection to NATS lost before the reply");
    this.name = "ConnectionLostError";
  }
}

/**
 * Thrown by a Worker handler, sends the job straight to the dead letters
 * (nack with `retry: false`) instead of retrying it. Any error with a
 * `retry` property set to `false` does the same.
 */
export class NonRetryableError extends Error {
  /**
   * @param {string} message
   * @param {ErrorOptions} [options]
   */
  constructor(message, options) {
    super(message, options);
    this.name = "NonRetryableError";
    /** @type {false} */
    this.retry = false;
  }
}

/**
 * The code of an HTTP status, for a reply that carries only the status
 * header (Go: api.CodeForHTTPStatus). 400 maps to INVALID_ARGUMENT and 409
 * to ABORTED.
 * @param {number} status
 * @returns {string}
 */
export function codeForHttpStatus(status) {
  switch (status) {
    case 400:
      return Codes.INVALID_ARGUMENT;
    case 401:
      return Codes.UNAUTHENTICATED;
    case 403:
      return Codes.PERMISSION_DENIED;
    case 404:
      return Codes.NOT_FOUND;
    case 409:
      return Codes.ABORTED;
    case 429:
      return Codes.RESOURCE_EXHAUSTED;
    case 503:
      return Codes.UNAVAILABLE;
    default:
      return Codes.INTERNAL;
  }
}
