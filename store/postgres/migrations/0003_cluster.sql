-- Several nodes on one database (store.ClusterStore). Unlike the job
-- tables, times here are timestamptz: they are compared only with each
-- other and with the callers' Now, a microsecond is all the contract keeps,
-- and an operator reads them as they are.

-- Leases: the ownership of a namespace partition, or the maintenance
-- leadership. holder is '' once released (expires_at NULL then); epoch
-- only grows: taking a lease from another holder, or after a release,
-- increments it, and a job write's fence names the epoch it holds.
CREATE TABLE leases (
	name       text   PRIMARY KEY,
	holder     text   NOT NULL,
	epoch      bigint NOT NULL,
	expires_at timestamptz
);

-- Members: a row per live node, refreshed by its heartbeats; info is what
-- the node says of itself (store.MemberInfo as JSON).
CREATE TABLE members (
	node       text        PRIMARY KEY,
	info       jsonb       NOT NULL,
	expires_at timestamptz NOT NULL
);

-- flexiq_fence is the first statement of a fenced job write: it raises
-- SQLSTATE FQ001 (store.ErrFenced), which aborts the transaction, unless
-- the lease is held by p_holder at p_epoch. FOR SHARE keeps the lease row
-- until the write commits: a LeaseAcquire taking the lease (an UPDATE of
-- the row) waits for the write, and a write whose check runs after the
-- take committed sees the new holder and epoch. The expiry is not looked
-- at: a lease changes hands only through such an UPDATE, which bumps the
-- epoch, so an expired lease nobody took is still safely the holder's.
CREATE FUNCTION flexiq_fence(p_lease text, p_holder text, p_epoch bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	cur_holder text;
	cur_epoch  bigint;
BEGIN
	SELECT l.holder, l.epoch INTO cur_holder, cur_epoch FROM leases l WHERE l.name = p_lease FOR SHARE;
	IF NOT FOUND THEN
		RAISE EXCEPTION 'flexiq: fenced: lease % was never taken', p_lease USING ERRCODE = 'FQ001';
	END IF;
	IF p_holder = '' OR cur_holder <> p_holder OR cur_epoch <> p_epoch THEN
		RAISE EXCEPTION 'flexiq: fenced: lease % is held by "%" at epoch %, not by "%" at epoch %',
			p_lease, cur_holder, cur_epoch, p_holder, p_epoch USING ERRCODE = 'FQ001';
	END IF;
	RETURN true;
END
$$;
