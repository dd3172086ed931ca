-- run_at becomes Unix microseconds (it was nanoseconds, as the other times
-- still are): a nanosecond count ends in the year 2262, and a job may run
-- as late as 9999-12-31T23:59:59Z. The division floors, as Go's UnixMicro
-- does, for a run_at before 1970 too. It rewrites every job, once, inside
-- the migration's transaction; stop every node of the old version first,
-- or they would go on writing nanoseconds.
UPDATE jobs SET run_at = run_at / 1000 - (CASE WHEN run_at % 1000 < 0 THEN 1 ELSE 0 END);
