// FlexiQ's Node.js SDK: a producer and a worker over NATS, speaking the v1
// protocol of docs/protocol.md. Types: ../index.d.ts.

export { Client, connect, connectOptions, inboxPrefix, replyError, Subjects, Limits } from "./client.js";
export { Worker } from "./worker.js";
export {
  FlexiQError,
  UnreachableError,
  ConnectionLostError,
  NonRetryableError,
  Codes,
  Reasons,
  UNAUTHENTICATED_MESSAGE,
  codeForHttpStatus,
} from "./errors.js";
