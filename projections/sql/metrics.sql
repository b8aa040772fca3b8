-- Scrape-time gauges (GET /metrics): one statement, so every figure shares a snapshot, and
-- each part reads a small partial index (migration 0019) or the small queue_stats table.
-- kind: 'tasks' (queue_stats counts; rows at zero kept, so a series that dropped to 0 reads
-- 0), 'oldest' (seconds since the oldest pending task of a queue and lane was submitted: a
-- task is pending only from its submission to its first runner job), 'jobs' (runner jobs
-- not yet ended, by status), 'lost' (runs that ended runner-lost).

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
