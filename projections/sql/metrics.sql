-- Scrape-time gauges (GET /metrics): one statement, so every figure shares a snapshot, and
-- each part reads a small partial index (migration 0019) or the small queue_stats table.
-- kind: 'tasks' (queue_stats counts; rows at zero kept, so a series that dropped to 0 reads
-- 0), 'oldest' (seconds since the oldest pending task of a queue and lane was submitted: a
-- task is pending only from its submission to its first runner job), 'jobs' (runner jobs
-- not yet ended, by status), 'lost' (runs that ended runner-lost), 'tokens' (token usage of
-- the ended attempts that reported some, by queue, profile and kind: in the state column).

-- name: service_gauges
SELECT 'tasks' AS kind, queue, lane, state, backend_profile AS profile,
       task_count::float8 AS value
FROM queue_stats
UNION ALL
SELECT 'oldest', s.queue, s.lane, '', '',
       greatest(extract(epoch FROM clock_timestamp() - (
           SELECT min(t.created_at) FROM task_summary t
           WHERE t.state = 'pending' AND t.queue = s.queue AND t.lane = s.lane)), 0)::float8
FROM (SELECT DISTINCT queue, lane FROM queue_stats
      WHERE state = 'pending' AND task_count > 0) s
UNION ALL
SELECT 'jobs', '', '', status, '', count(*)::float8 FROM runner_job_record
WHERE status IN ('created', 'running') GROUP BY status
UNION ALL
SELECT 'lost', '', '', '', '', count(*)::float8 FROM run_record
WHERE failure_kind = 'runner-lost'
UNION ALL
SELECT 'tokens', t.queue, '', u.kind, a.backend_profile, sum(u.n)::float8
FROM attempt_summary a JOIN task_summary t ON t.task_id = a.task_id
CROSS JOIN LATERAL (VALUES ('input', a.input_tokens), ('cached_input', a.cached_input_tokens),
                           ('output', a.output_tokens),
                           ('reasoning_output', a.reasoning_output_tokens)) u (kind, n)
WHERE a.input_tokens IS NOT NULL
GROUP BY t.queue, a.backend_profile, u.kind
