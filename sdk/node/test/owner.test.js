// The client follows the owner a clustered node names in its replies
// (docs/protocol.md "Going straight to the owner"): its next calls go to
// fq.v1.o.<owner>.<op>, and back to the plain subject when nobody listens
// there. A scripted connection stands in for NATS, so the test
// sees exactly which subject each call went to; the Go end-to-end tests
// cover the same against real clustered nodes.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { errors as natsErrors } from "@nats-io/transport-node";

import { Client } from "../src/index.js";

const encoder = new TextEncoder();

/** A reply message with the given headers and JSON body. */
function reply(body, headers = {}) {
  const h = new Map(Object.entries(headers));
  return { data: encoder.encode(JSON.stringify(body)), headers: { keys: () => [...h.keys()], get: (k) => h.get(k) ?? "" } };
}

/** A connection whose request() answers from script(subject). */
function scripted(script) {
  const subjects = [];
  let close;
  const closed = new Promise((resolve) => (close = resolve));
  return {
    subjects,
    close,
    info: { max_payload: 1 << 20 },
    isClosed: () => false,
    status() {
      return (async function* () {
        await closed;
      })();
    },
    async request(subject) {
      subjects.push(subject);
      return script(subject);
    },
  };
}

const enqueued = { results: [{ id: "j1", outcome: "enqueued" }] };

const OWNER = "0123456789abcdef";
const OTHER = "fedcba9876543210";

describe("owner hint", () => {
  it("sends to the named owner, follows a new one, then falls back when nobody listens there", async () => {
    let listening = true;
    let owner = OWNER;
    const nc = scripted((subject) => {
      if (subject === `fq.v1.o.${OWNER}.enqueue` && !listening) {
        throw new natsErrors.RequestError("no responders", { cause: new natsErrors.NoRespondersError(subject) });
      }
      return reply(enqueued, { "Fq-Owner": owner });
    });
    const c = new Client(nc, "tok");
    try {
      await c.enqueue({ queue: "q", task: "t" });
      await c.enqueue({ queue: "q", task: "t" });
      await c.ack("j1");
      assert.deepEqual(nc.subjects, ["fq.v1.enqueue", `fq.v1.o.${OWNER}.enqueue`, `fq.v1.o.${OWNER}.ack`]);

      owner = OTHER; // the namespace moved: the old owner passed the call on
      nc.subjects.length = 0;
      await c.enqueue({ queue: "q", task: "t" });
      await c.enqueue({ queue: "q", task: "t" });
      assert.deepEqual(nc.subjects, [`fq.v1.o.${OWNER}.enqueue`, `fq.v1.o.${OTHER}.enqueue`]);

      owner = OWNER;
      await c.enqueue({ queue: "q", task: "t" });
      listening = false; // that node is gone
      nc.subjects.length = 0;
      await c.enqueue({ queue: "q", task: "t" });
      assert.deepEqual(nc.subjects, [`fq.v1.o.${OWNER}.enqueue`, "fq.v1.enqueue"]);
    } finally {
      nc.close();
    }
  });

  it("ignores an owner it cannot use and keeps plain subjects without one", async () => {
    const names = ["", "x", "7", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0", "0123456789abcde*"];
    const nc = scripted(() => reply(enqueued, { "Fq-Owner": names.shift() ?? "" }));
    const c = new Client(nc, "tok");
    try {
      for (let i = 0; i < 8; i++) await c.enqueue({ queue: "q", task: "t" });
      assert.ok(nc.subjects.every((s) => s === "fq.v1.enqueue"), nc.subjects.join(" "));
    } finally {
      nc.close();
    }
  });

  it("does not send again after a refusal or a timeout on the owner subject", async () => {
    let first = true;
    const nc = scripted((subject) => {
      if (first) {
        first = false;
        return reply(enqueued, { "Fq-Owner": OWNER });
      }
      assert.equal(subject, `fq.v1.o.${OWNER}.enqueue`);
      throw new natsErrors.TimeoutError();
    });
    const c = new Client(nc, "tok");
    try {
      await c.enqueue({ queue: "q", task: "t" });
      await assert.rejects(c.enqueue({ queue: "q", task: "t" }), /no node answered/);
      // A timeout may have been acted on: the call is not sent twice.
      assert.deepEqual(nc.subjects, ["fq.v1.enqueue", `fq.v1.o.${OWNER}.enqueue`]);
    } finally {
      nc.close();
    }
  });
});
