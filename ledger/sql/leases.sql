-- name: renew
INSERT INTO runner_job_leases AS l (runner_job_id, last_seen, token_sha256, session_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (runner_job_id) DO UPDATE
SET last_seen = greatest(l.last_seen, EXCLUDED.last_seen), renewals = l.renewals + 1,
    token_sha256 = EXCLUDED.token_sha256, session_id = EXCLUDED.session_id

-- name: renew_held
-- A heartbeat renews liveness, not history: its one-statement transaction commits without
-- waiting for the WAL flush (`synchronous_commit` off for this transaction only, migration
-- 0026). A crash of Postgres can take back at most the last few hundred milliseconds of
-- renewals, which the next beats give again; every ledger event and every line batch still
-- waits for the flush.
SELECT runner_lease_renew_held($1, $2, $3)

-- name: last_seen
SELECT last_seen FROM runner_job_leases WHERE runner_job_id = $1

-- name: release
DELETE FROM runner_job_leases WHERE runner_job_id = $1

-- name: let_go
UPDATE runner_job_leases SET token_sha256 = NULL WHERE runner_job_id = $1

-- name: held_session
SELECT session_id FROM runner_job_leases
WHERE runner_job_id = $1 AND token_sha256 = $2 AND session_id IS NOT NULL

-- name: renew_held_group
-- `renew_held` of several beats (ledger/grouped.py), in the order given, in one statement:
-- its transaction holds beats only, so it too commits without waiting for the flush. A lock
-- waited for longer than $4 fails it (the beats are then renewed one by one).
WITH limits AS MATERIALIZED (SELECT set_config('lock_timeout', $4, true))
SELECT runner_lease_renew_held(b.job_id, b.token_hash, b.seen_at)
FROM unnest($1::text[], $2::text[], $3::timestamptz[])
     WITH ORDINALITY AS b(job_id, token_hash, seen_at, n)
WHERE EXISTS (SELECT FROM limits)
ORDER BY b.n
