-- Scrape-time gauges (issue 28 item 2, projections/sql/metrics.sql) read small partial
-- indexes, never a whole table: the oldest pending task of each queue and lane (one index
-- probe each), the runner jobs not yet ended, the runs that ended runner-lost.

CREATE INDEX task_summary_pending_age ON task_summary (queue, lane, created_at)
    WHERE state = 'pending';
CREATE INDEX runner_job_record_live ON runner_job_record (status)
    WHERE status IN ('created', 'running');
CREATE INDEX run_record_runner_lost ON run_record (run_id)
    WHERE failure_kind = 'runner-lost';
