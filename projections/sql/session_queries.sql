-- name: list_sessions
SELECT s.session_id, s.conversation_id, s.thread_id, s.backend_profile, s.state,
       s.version > coalesce(c.version, 0) AS unread, s.storage_kind, s.latest_run_id,
       s.latest_task_id, s.turns, s.failure_kind, s.version, s.change_seq, s.expires_at,
       s.updated_at
FROM session_summary s
LEFT JOIN session_read_cursor c ON c.session_id = s.session_id AND c.reader_id = $1
WHERE s.change_seq < $2
  AND ($3::text IS NULL OR s.backend_profile = $3)
  AND ($7::text IS NULL OR s.tenant_id = $7)
  AND (s.state = ANY($4::text[]) OR ($6::boolean AND s.version > coalesce(c.version, 0)))
ORDER BY s.change_seq DESC
LIMIT $5

-- name: get_session
SELECT s.session_id, s.conversation_id, s.thread_id, s.backend_profile, s.state,
       s.version > coalesce(c.version, 0) AS unread, s.storage_kind, s.latest_run_id,
       s.latest_task_id, s.turns, s.failure_kind, s.version, s.change_seq, s.expires_at,
       s.updated_at, s.run_id, s.pvc_name, s.pvc_phase, s.storage_size_bytes,
       s.storage_files_count, s.storage_sha256, s.storage_updated_at
FROM session_summary s
LEFT JOIN session_read_cursor c ON c.session_id = s.session_id AND c.reader_id = $2
WHERE s.session_id = $1

-- name: recent_turns
SELECT run_id, command_id, runner_job_id, task_id, coalesce(result_thread_id, thread_id)
       AS thread_id, thread_id IS NOT NULL AS resumed, status, failure_kind, exit_code,
       created_at, finished_at
FROM session_turn WHERE session_id = $1 ORDER BY created_at DESC, runner_job_id DESC LIMIT $2

-- name: high_water
SELECT last_seq FROM ledger_head WHERE id = 1
