-- Read queries. Each is one statement, so the high-water mark and the rows share a snapshot.
-- Optional filters use "$n IS NULL OR …"; the pool forces custom plans so indexes are used.

-- name: list_tasks
-- $6 true: changed after $4 (up to the high-water mark), oldest first; false: newest first,
-- below $4. With custom plans each CASE folds to one plain condition and one sort key, so
-- both directions scan an index (no sort).
SELECT h.last_seq AS high_water, t.*
FROM ledger_head h
LEFT JOIN LATERAL (
    SELECT task_id, tenant_id, project_id, queue, lane, title, priority, state, backend_profile,
           summary, version, change_seq, latest_attempt::text AS latest_attempt, created_at,
           updated_at
    FROM task_summary
    WHERE ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR lane = $2)
      AND ($3::text IS NULL OR state = $3)
      AND ($7::text IS NULL OR tenant_id = $7) AND ($8::text[] IS NULL OR project_id = ANY($8))
      AND CASE WHEN $6::bool THEN change_seq > $4 AND change_seq <= h.last_seq
               ELSE change_seq < $4 END
    ORDER BY CASE WHEN $6 THEN change_seq END ASC, CASE WHEN NOT $6 THEN change_seq END DESC
    LIMIT $5
) t ON true
WHERE h.id = 1

-- name: get_task
SELECT task_id, tenant_id, project_id, queue, lane, title, priority, state, backend_profile,
       summary, version, change_seq, payload_hash, latest_attempt::text AS latest_attempt,
       creator, created_at, updated_at, attempt_count, last_duration_ms, latest_started_at,
       c.contract::text AS contract
FROM task_summary JOIN task_contract c USING (task_id) WHERE task_id = $1

-- name: get_tasks
SELECT task_id, tenant_id, project_id, queue, lane, title, priority, state, backend_profile,
       summary, version, change_seq, payload_hash, latest_attempt::text AS latest_attempt,
       creator, created_at, updated_at, attempt_count, last_duration_ms, latest_started_at,
       c.contract::text AS contract
FROM task_summary JOIN task_contract c USING (task_id) WHERE task_id = ANY($1::text[])

-- name: high_water
SELECT last_seq FROM ledger_head WHERE id = 1

-- name: stats
-- The counters are kept per tenant and project: summed over those the caller sees ($4, $5).
SELECT h.last_seq AS high_water, s.queue, s.lane, s.state,
       nullif(s.backend_profile, '') AS backend_profile, s.task_count AS count
FROM ledger_head h
LEFT JOIN LATERAL (
    SELECT queue, lane, state, backend_profile, sum(task_count)::bigint AS task_count
    FROM queue_stats
    WHERE ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR lane = $2)
      AND ($4::text IS NULL OR tenant_id = $4) AND ($5::text[] IS NULL OR project_id = ANY($5))
      AND task_count <> 0
    GROUP BY queue, lane, state, backend_profile
    HAVING sum(task_count) <> 0
    ORDER BY queue, lane, state, backend_profile
    LIMIT $3
) s ON true
WHERE h.id = 1

-- name: token_stats
-- Token usage of the ended attempts that reported some, summed per queue and per backend
-- profile at read time, over the tasks the caller sees ($3, $4), as the stats filter them.
SELECT CASE WHEN grouping(t.queue) = 0 THEN 'queue' ELSE 'profile' END AS kind,
       CASE WHEN grouping(t.queue) = 0 THEN t.queue ELSE a.backend_profile END AS name,
       sum(a.input_tokens)::bigint AS input_tokens,
       coalesce(sum(a.cached_input_tokens), 0)::bigint AS cached_input_tokens,
       coalesce(sum(a.output_tokens), 0)::bigint AS output_tokens,
       coalesce(sum(a.reasoning_output_tokens), 0)::bigint AS reasoning_output_tokens
FROM attempt_summary a JOIN task_summary t ON t.task_id = a.task_id
WHERE a.input_tokens IS NOT NULL
  AND ($1::text IS NULL OR t.queue = $1) AND ($2::text IS NULL OR t.lane = $2)
  AND ($3::text IS NULL OR t.tenant_id = $3) AND ($4::text[] IS NULL OR t.project_id = ANY($4))
GROUP BY GROUPING SETS ((t.queue), (a.backend_profile))
ORDER BY 1, 2

-- name: commander_items
SELECT c.task_id, t.queue, t.lane, t.title, t.state, t.version, c.change_seq,
       t.latest_attempt::text AS latest_attempt,
       CASE WHEN $3::text IS NULL THEN NULL ELSE coalesce(rc.version, 0) < t.version END
       AS unread
FROM commander_view c
JOIN task_summary t ON t.task_id = c.task_id
LEFT JOIN read_cursor rc ON rc.task_id = c.task_id AND rc.reader_id = $3
WHERE ($1::text IS NULL OR c.queue = $1) AND ($2::text IS NULL OR t.lane = $2)
  AND ($5::text IS NULL OR c.tenant_id = $5) AND ($6::text[] IS NULL OR c.project_id = ANY($6))
ORDER BY c.attention, c.change_seq DESC
LIMIT $4

-- name: list_attempts
SELECT h.last_seq AS high_water, a.*
FROM ledger_head h
LEFT JOIN LATERAL (
    SELECT attempt_id, task_id, retry_index, state, idempotency_key, reason,
           previous_attempt_id, run_id, command_id, runner_job_id, session_id, backend_profile,
           failure_kind, failure_message, exit_code, change_seq, created_at, started_at,
           finished_at, updated_at, input_tokens, cached_input_tokens, output_tokens,
           reasoning_output_tokens
    FROM attempt_summary
    WHERE task_id = $1 AND retry_index >= $2
    ORDER BY retry_index
    LIMIT $3
) a ON true
WHERE h.id = 1

-- name: get_attempt
SELECT attempt_id, task_id, retry_index, state, idempotency_key, reason, previous_attempt_id,
       run_id, command_id, runner_job_id, session_id, backend_profile, failure_kind,
       failure_message, exit_code, change_seq, created_at, started_at, finished_at, updated_at,
       input_tokens, cached_input_tokens, output_tokens, reasoning_output_tokens
FROM attempt_summary WHERE task_id = $1 AND attempt_id = $2

-- name: get_run
SELECT h.last_seq AS change_seq, r.run_id, r.task_id, r.attempt_id, r.runner_job_id,
       r.session_id, r.backend_profile, r.status, r.failure_kind, r.failure_message,
       r.exit_code, r.driver, r.job_plan::text AS plan, r.assembly::text AS assembly,
       r.runner_startup::text AS runner_startup, a.state AS attempt_state
FROM ledger_head h
JOIN run_record r ON r.run_id = $1
LEFT JOIN attempt_summary a ON a.task_id = r.task_id AND a.attempt_id = r.attempt_id
WHERE h.id = 1

-- name: get_reserved_run
SELECT a.task_id, a.attempt_id, a.state
FROM attempt_summary a WHERE a.run_id = $1

-- name: judge_runs
-- The judge runs of some attempts of a task (NULL: every attempt), oldest first, bounded.
SELECT task_id, judge_id, attempt_id, judge, result, failure_kind, retry_suggested,
       retry_reason, summary, request::text AS request, change_seq, created_at
FROM judge_run
WHERE task_id = $1 AND ($2::text[] IS NULL OR attempt_id = ANY($2::text[]))
ORDER BY change_seq
LIMIT $3

-- name: get_judge_run
SELECT task_id, judge_id, attempt_id, judge, result, failure_kind, retry_suggested,
       retry_reason, summary, request::text AS request, change_seq, created_at
FROM judge_run WHERE task_id = $1 AND judge_id = $2

-- name: task_owner
SELECT tenant_id, project_id FROM task_summary WHERE task_id = $1

-- name: run_owner
-- A run's task: from its record once created, else from the attempt it was reserved for.
SELECT t.tenant_id, t.project_id
FROM task_summary t
WHERE t.task_id = coalesce((SELECT task_id FROM run_record WHERE run_id = $1),
                           (SELECT task_id FROM attempt_summary WHERE run_id = $1 LIMIT 1))

-- name: session_owner
SELECT tenant_id, NULL::text AS project_id FROM session_summary WHERE session_id = $1
