-- name: renew
INSERT INTO runner_job_leases AS l (runner_job_id, last_seen) VALUES ($1, $2)
ON CONFLICT (runner_job_id) DO UPDATE
SET last_seen = greatest(l.last_seen, EXCLUDED.last_seen), renewals = l.renewals + 1

-- name: last_seen
SELECT last_seen FROM runner_job_leases WHERE runner_job_id = $1

-- name: release
DELETE FROM runner_job_leases WHERE runner_job_id = $1
