-- A heartbeat's renewal is planned once per connection, not at every beat (issue 29, the
-- fleet's cost), as a batch of lines is since 0025: the read pools force custom plans, and
-- the renewal's statement was planned anew at each beat. The function keeps what the
-- statement did (ledger/sql/leases.sql `renew_held`): the row renewed in place only while
-- it holds the token, and its transaction committed without waiting for the WAL flush. The
-- `set_config(…, true)` inside outlives the function (only the function's own SET clause is
-- undone at its end) and ends with the transaction, as before.
CREATE FUNCTION runner_lease_renew_held(job_id text, token_hash text, seen_at timestamptz)
RETURNS boolean
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    UPDATE runner_job_leases AS l
    SET last_seen = greatest(l.last_seen, seen_at), renewals = l.renewals + 1
    WHERE l.runner_job_id = job_id AND l.token_sha256 = token_hash;
    RETURN FOUND;
END
$$;

-- Said outright for the service's group role, as for 0023's function (a DBA may revoke
-- PUBLIC's right to execute by default).
GRANT EXECUTE ON FUNCTION runner_lease_renew_held(text, text, timestamptz) TO svc_app;
