-- Queries of the session layer's manager side.

-- name: session_row
SELECT * FROM session_summary WHERE session_id = $1

-- name: active_turns
SELECT runner_job_id, run_id, task_id, status FROM session_turn
WHERE session_id = $1 AND status = ANY($2::text[])

-- name: live_sessions_of_tenant
SELECT count(*) FROM session_summary WHERE tenant_id = $1 AND storage_kind = $2

-- name: running_sessions
SELECT session_id FROM session_summary WHERE state = $2 ORDER BY change_seq LIMIT $1

-- name: latest_turn
SELECT runner_job_id, run_id, command_id, task_id, status FROM session_turn
WHERE session_id = $1 ORDER BY created_at DESC, runner_job_id DESC LIMIT 1

-- name: turn_by_command
SELECT runner_job_id, session_id, run_id, command_id, thread_id, status FROM session_turn
WHERE command_id = $1

-- name: expired_sessions
SELECT session_id, conversation_id, pvc_name FROM session_summary
WHERE storage_kind = $3 AND expires_at < $1 AND state <> $4
ORDER BY expires_at LIMIT $2

-- name: run_row
SELECT run_id, task_id, attempt_id, session_id, conversation_id, backend_profile,
       base::text AS base
FROM run_record WHERE run_id = $1

-- name: running_turns
-- The started turns of the first $1 running sessions changed after $6 (oldest change first:
-- a page; the next starts after its last change_seq; a session with no started turn is a row
-- with no job), each with its session's change_seq and whether its job is quiet: its lease
-- renewed at or after $3 by a token the row still holds (let go at the job's exit, gone at
-- its end) and neither an exit nor an end in its stream ($4). A job that is not quiet needs
-- the whole look.
SELECT s.session_id, t.runner_job_id, s.change_seq,
       coalesce(l.last_seen >= $3 AND l.token_sha256 IS NOT NULL, false)
       AND NOT EXISTS (SELECT 1 FROM ledger e WHERE e.stream_id = t.runner_job_id
                       AND e.event_type = ANY($4::text[])) AS quiet
FROM (SELECT session_id, change_seq FROM session_summary WHERE state = $2
      AND change_seq > $6 ORDER BY change_seq LIMIT $1) s
LEFT JOIN session_turn t ON t.session_id = s.session_id AND t.status = $5
LEFT JOIN runner_job_leases l ON l.runner_job_id = t.runner_job_id
ORDER BY s.change_seq, t.created_at
