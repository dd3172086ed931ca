-- Jobs in every status. seq is the rowid: enqueue order, and inserts stay at
-- the B-tree's right edge. Times are Unix nanoseconds.
-- status: 0 pending and due (available), 1 running, 2 completed, 3 dead,
-- 4 pending with a future run_at (scheduled). A claim promotes scheduled
-- jobs of its queues once due, so its scan reads only jobs it may hand out.
CREATE TABLE jobs (
	seq          INTEGER PRIMARY KEY,
	namespace    TEXT    NOT NULL,
	id           TEXT    NOT NULL,
	queue        TEXT    NOT NULL,
	task         TEXT    NOT NULL,
	payload      BLOB,
	priority     INTEGER NOT NULL DEFAULT 0,
	run_at       INTEGER NOT NULL,
	max_attempts INTEGER NOT NULL DEFAULT 0,
	attempt      INTEGER NOT NULL DEFAULT 0,
	status       INTEGER NOT NULL,
	unique_key   TEXT,
	debounce_key TEXT,
	lease_until  INTEGER,
	worker       TEXT,
	error        TEXT,
	result       BLOB,
	dead_meta    BLOB,
	created_at   INTEGER NOT NULL,
	finished_at  INTEGER,
	shed         INTEGER NOT NULL DEFAULT 0,
	no_retry     INTEGER NOT NULL DEFAULT 0,
	dead_replays INTEGER NOT NULL DEFAULT 0
);

-- Ids are per namespace; a repeated id is found here in any status.
CREATE UNIQUE INDEX jobs_ns_id ON jobs (namespace, id);

-- Claims: available jobs of one queue in dispatch order. Also counts a
-- namespace's available jobs without touching the table.
CREATE INDEX jobs_claim ON jobs (namespace, queue, priority DESC, run_at, seq)
	WHERE status = 0;

-- Scheduled jobs by due time: promotion at claim time, the next wake-up.
CREATE INDEX jobs_scheduled ON jobs (namespace, queue, run_at)
	WHERE status = 4;

-- A unique key is held while its job is pending or running; a debounce key
-- while it is pending. Partial indexes cost nothing for jobs without keys.
CREATE UNIQUE INDEX jobs_unique ON jobs (namespace, unique_key)
	WHERE unique_key IS NOT NULL AND status IN (0, 1, 4);
CREATE UNIQUE INDEX jobs_debounce ON jobs (namespace, debounce_key)
	WHERE debounce_key IS NOT NULL AND status IN (0, 4);

CREATE INDEX jobs_running ON jobs (namespace, lease_until) WHERE status = 1;

-- Retention: TTL sweeps across namespaces, and row ceilings per namespace.
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE status IN (2, 3);
CREATE INDEX jobs_ns_finished ON jobs (namespace, status, finished_at) WHERE status IN (2, 3);

-- Settings: quota documents and generic settings. A deleted setting keeps
-- its row (value NULL) so its revision keeps counting.
CREATE TABLE settings (
	key        TEXT PRIMARY KEY,
	value      BLOB,
	revision   INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE audit (
	id          INTEGER PRIMARY KEY,
	at          INTEGER NOT NULL,
	actor       TEXT    NOT NULL,
	action      TEXT    NOT NULL,
	target_kind TEXT    NOT NULL,
	target      TEXT    NOT NULL,
	namespace   TEXT    NOT NULL,
	before      BLOB,
	after       BLOB
);
CREATE INDEX audit_ns ON audit (namespace, id);

CREATE TABLE tokens (
	id         TEXT PRIMARY KEY,
	hash       BLOB    NOT NULL UNIQUE,
	namespace  TEXT    NOT NULL,
	role       TEXT    NOT NULL,
	created_at INTEGER NOT NULL,
	revoked_at INTEGER
);

-- Namespace configuration: queue and task settings, triggers, periodic
-- schedules. seq keeps creation order.
CREATE TABLE config (
	seq        INTEGER PRIMARY KEY,
	namespace  TEXT    NOT NULL,
	kind       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	value      BLOB    NOT NULL,
	revision   INTEGER NOT NULL,
	updated_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX config_key ON config (namespace, kind, name);
CREATE INDEX config_kind ON config (kind, seq);
