-- A fenced write locks its lease row FOR KEY SHARE instead of FOR SHARE.
-- FOR SHARE also held off a lease's renewal (an UPDATE of expires_at by
-- its own holder) while any fenced write of the partition was open, and
-- share locks of overlapping writes could keep it off for seconds: the
-- holder's lease ran out under load. FOR KEY SHARE lets updates that keep
-- the row's key pass and stops those that change it; epoch joins the key
-- here (a unique index on it), so a take, which bumps the epoch, still
-- waits for the fenced writes in flight, and a write checked after it
-- sees the new epoch. Nodes of the version before take leases the same
-- way (their UPDATE bumps the epoch), so old and new nodes fence each
-- other as before.
CREATE UNIQUE INDEX leases_name_epoch ON leases (name, epoch);

CREATE OR REPLACE FUNCTION flexiq_fence(p_lease text, p_holder text, p_epoch bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
	cur_holder text;
	cur_epoch  bigint;
BEGIN
	SELECT l.holder, l.epoch INTO cur_holder, cur_epoch FROM leases l WHERE l.name = p_lease FOR KEY SHARE;
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
