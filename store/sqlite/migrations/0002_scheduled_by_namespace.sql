-- The earliest delayed job of a whole namespace, read when an actor starts
-- and after a claim made delayed jobs available.
CREATE INDEX jobs_scheduled_ns ON jobs (namespace, run_at) WHERE status = 4;
