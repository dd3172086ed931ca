-- A fenced write checks its lease with one SQL statement (fenceSQL)
-- instead of a call of flexiq_fence: the PL/pgSQL function ran its
-- SELECT … FOR KEY SHARE through the function's own executor, about a
-- third of the check's time, on every step of every namespace. The
-- statement locks the same row the same way, so nodes of the version
-- before, which call flexiq_fence (kept), and nodes of this one fence each
-- other as before. flexiq_fence_refused only raises the check's error,
-- SQLSTATE FQ001, for a lease never taken (cur_holder NULL) or held by
-- another holder or at another epoch.
CREATE FUNCTION flexiq_fence_refused(p_lease text, cur_holder text, cur_epoch bigint, p_holder text, p_epoch bigint)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	IF cur_holder IS NULL THEN
		RAISE EXCEPTION 'flexiq: fenced: lease % was never taken', p_lease USING ERRCODE = 'FQ001';
	END IF;
	RAISE EXCEPTION 'flexiq: fenced: lease % is held by "%" at epoch %, not by "%" at epoch %',
		p_lease, cur_holder, cur_epoch, p_holder, p_epoch USING ERRCODE = 'FQ001';
END
$$;
