-- A job's names and keys compare byte by byte (COLLATE "C"), as SQLite
-- and Redis compare them. In the database's default collation every
-- comparison in the indexes on them (jobs_ns_id, jobs_claim, the key and
-- scheduled indexes) goes through the collation's library (the C
-- library's strcoll, or ICU): with ICU's en-US an insert of 300 000 jobs
-- took about 16 % longer than with "C" (C.UTF-8, whose comparisons are
-- cheap already, measured the same as "C"). FlexiQ never orders by these
-- columns, and a byte
-- comparison finds what an equality under any deterministic collation
-- finds, so only the speed changes (docs/performance.md, "PostgreSQL:
-- names compared as bytes").
--
-- The table is not rewritten (the type stays text); the indexes on these
-- columns are rebuilt, once, inside the migration's transaction, under
-- an exclusive lock on jobs: on a large table the other nodes' job writes
-- wait for it. A node of the older version still running then has each
-- statement it prepared that returns these columns refused once ("cached
-- plan must not change result type"; pgx prepares it again at its next
-- use): README, "Upgrading a PostgreSQL store to byte-compared names".
ALTER TABLE jobs
	ALTER COLUMN namespace TYPE text COLLATE "C",
	ALTER COLUMN id TYPE text COLLATE "C",
	ALTER COLUMN queue TYPE text COLLATE "C",
	ALTER COLUMN task TYPE text COLLATE "C",
	ALTER COLUMN unique_key TYPE text COLLATE "C",
	ALTER COLUMN debounce_key TYPE text COLLATE "C";
