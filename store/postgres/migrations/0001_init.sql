-- Jobs in every status. seq is the enqueue order (a sequence: later
-- enqueues, in any namespace, get larger values). Times are Unix
-- nanoseconds, as in the SQLite backend; NULL is the zero time.
-- status: 0 pending and due (available), 1 running, 2 completed, 3 dead,
-- 4 pending with a future run_at (scheduled). A claim promotes its queues'
-- scheduled jobs once due, so its scan reads only jobs it may hand out.
-- Fixed-width columns come first: no alignment padding between them.
CREATE TABLE jobs (
	seq          bigserial PRIMARY KEY,
	priority     bigint   NOT NULL DEFAULT 0,
	run_at       bigint   NOT NULL,
	max_attempts bigint   NOT NULL DEFAULT 0,
	attempt      bigint   NOT NULL DEFAULT 0,
	created_at   bigint   NOT NULL,
	lease_until  bigint,
	finished_at  bigint,
	dead_replays bigint   NOT NULL DEFAULT 0,
	status       smallint NOT NULL,
	shed         boolean  NOT NULL DEFAULT false,
	no_retry     boolean  NOT NULL DEFAULT false,
	namespace    text     NOT NULL,
	id           text     NOT NULL,
	queue        text     NOT NULL,
	task         text     NOT NULL,
	unique_key   text,
	debounce_key text,
	worker       text,
	error        text,
	payload      bytea,
	result       bytea,
	dead_meta    bytea
);

-- Ids are per namespace; a repeated id is found here in any status.
CREATE UNIQUE INDEX jobs_ns_id ON jobs (namespace, id);

-- Claims: available jobs of one queue in dispatch order. Also counts a
-- namespace's available jobs.
CREATE INDEX jobs_claim ON jobs (namespace, queue, priority DESC, run_at, seq)
	WHERE status = 0;

-- Scheduled jobs by due time: promotion at claim time, the next wake-up
-- of some queues, and of a whole namespace.
CREATE INDEX jobs_scheduled ON jobs (namespace, queue, run_at)
	WHERE status = 4;
CREATE INDEX jobs_scheduled_ns ON jobs (namespace, run_at)
	WHERE status = 4;

-- A unique key is held while its job is pending or running; a debounce key
-- while it is pending. Partial indexes cost nothing for jobs without keys.
CREATE UNIQUE INDEX jobs_unique ON jobs (namespace, unique_key)
	WHERE unique_key IS NOT NULL AND status IN (0, 1, 4);
CREATE UNIQUE INDEX jobs_debounce ON jobs (namespace, debounce_key)
	WHERE debounce_key IS NOT NULL AND status IN (0, 4);

-- Running jobs: counts and lists a namespace's. Keyed by id rather than
-- lease_until, so a lease extension changes no indexed column and may be a
-- HOT update.
CREATE INDEX jobs_running ON jobs (namespace, id) WHERE status = 1;

-- Retention: TTL sweeps across namespaces, and row ceilings per namespace.
-- Queries say "status IN (2, 3) AND status = $n" so a generic plan can
-- still prove these predicates.
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE status IN (2, 3);
CREATE INDEX jobs_ns_finished ON jobs (namespace, status, finished_at, seq) WHERE status IN (2, 3);

-- Settings: quota documents and generic settings. A deleted setting keeps
-- its row (value NULL) so its revision keeps counting. Keys sort bytewise
-- (COLLATE "C") whatever the database's collation, and prefixes are
-- literal.
CREATE TABLE settings (
	key        text COLLATE "C" PRIMARY KEY,
	revision   bigint NOT NULL,
	updated_at bigint NOT NULL,
	value      bytea
);

CREATE TABLE audit (
	id          bigserial PRIMARY KEY,
	at          bigint NOT NULL,
	actor       text   NOT NULL,
	action      text   NOT NULL,
	target_kind text   NOT NULL,
	target      text   NOT NULL,
	namespace   text   NOT NULL,
	before      bytea,
	after       bytea
);
CREATE INDEX audit_ns ON audit (namespace, id);

CREATE TABLE tokens (
	id         text   PRIMARY KEY,
	hash       bytea  NOT NULL UNIQUE,
	namespace  text   NOT NULL,
	role       text   NOT NULL,
	created_at bigint NOT NULL,
	revoked_at bigint
);

-- Namespace configuration: queue and task settings, triggers, periodic
-- schedules. seq keeps creation order.
CREATE TABLE config (
	seq        bigserial PRIMARY KEY,
	revision   bigint NOT NULL,
	updated_at bigint NOT NULL,
	namespace  text   NOT NULL,
	kind       text   NOT NULL,
	name       text   NOT NULL,
	value      bytea  NOT NULL
);
CREATE UNIQUE INDEX config_key ON config (namespace, kind, name);
CREATE INDEX config_kind ON config (kind, seq);
