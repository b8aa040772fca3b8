-- Queries of the dispatcher: task facts, attempt rows, fences and runner capacity.

-- name: task_facts
SELECT t.backend_profile, c.contract::text AS contract
FROM task_summary t JOIN task_contract c USING (task_id)
WHERE task_id = $1

-- name: attempt_row
SELECT run_id, command_id, runner_job_id, session_id, backend_profile, state
FROM attempt_summary WHERE task_id = $1 AND attempt_id = $2

-- name: attempt_state
SELECT state FROM attempt_summary WHERE task_id = $1 AND attempt_id = $2

-- name: latest_attempt_of_task
SELECT a.attempt_id, a.run_id, a.runner_job_id, a.state, a.session_id
FROM task_summary t
JOIN attempt_summary a ON a.task_id = t.task_id AND a.attempt_id = t.latest_attempt->>'attemptId'
WHERE t.task_id = $1

-- name: ensure_capacity
INSERT INTO runner_capacity (namespace, max_jobs, active_jobs) VALUES ($1, $2, 0)
ON CONFLICT (namespace) DO NOTHING

-- name: take_capacity
UPDATE runner_capacity SET active_jobs = active_jobs + 1
WHERE namespace = $1 AND active_jobs < max_jobs
RETURNING active_jobs

-- name: capacity_seen
SELECT active_jobs FROM runner_capacity WHERE namespace = $1

-- name: running_jobs
SELECT count(*) FROM runner_job_record WHERE status = $1

-- name: reclaim_capacity
UPDATE runner_capacity SET active_jobs = $2 WHERE namespace = $1 AND active_jobs = $3

-- name: session_of_job
SELECT session_id FROM session_turn WHERE runner_job_id = $1
