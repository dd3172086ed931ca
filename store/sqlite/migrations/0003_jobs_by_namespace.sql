-- A namespace's jobs newest first (GET /v1/jobs, fq jobs): without it a
-- listing sorts every job the namespace has, archive included, to return
-- a page. Only enqueues and deletes touch it: claims and acks change
-- neither key.
CREATE INDEX jobs_ns_seq ON jobs (namespace, seq);
