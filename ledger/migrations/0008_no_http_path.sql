-- A projection holds no HTTP path (issue 12): the API computes a session's path from its id.
-- The stored latestAttempt text keeps its other keys, in their order and encoding, so a
-- rebuilt row (replay) has the same text as the migrated live row.

ALTER TABLE task_summary DROP COLUMN session_path;
UPDATE task_summary
SET latest_attempt = regexp_replace(latest_attempt::text,
                                    ',"sessionPath":"(?:[^"\\]|\\.)*"', '')::json
WHERE latest_attempt::text LIKE '%"sessionPath":%';

-- Judge runs (SPEC 2.3): a judge's verdict on an attempt, folded from task-judge-recorded.
CREATE TABLE judge_run (
    task_id         text        NOT NULL,
    judge_id        text        NOT NULL,
    attempt_id      text        NOT NULL,
    judge           text        NOT NULL,
    result          text        NOT NULL,
    failure_kind    text,
    retry_suggested boolean     NOT NULL,
    retry_reason    text,
    summary         text,
    request         json,
    change_seq      bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    PRIMARY KEY (task_id, judge_id)
);
CREATE INDEX judge_run_attempt ON judge_run (task_id, attempt_id, change_seq);

-- Task summary statistic fields (SPEC 2.3), filled for existing tasks from their attempts
-- exactly as the fold computes them (whole milliseconds, floored).
ALTER TABLE task_summary ADD COLUMN attempt_count integer NOT NULL DEFAULT 0,
                         ADD COLUMN last_duration_ms bigint,
                         ADD COLUMN latest_started_at timestamptz;
UPDATE task_summary t SET
    attempt_count = (SELECT count(*) FROM attempt_summary a WHERE a.task_id = t.task_id),
    latest_started_at = (SELECT a.started_at FROM attempt_summary a
                         WHERE a.task_id = t.task_id
                           AND a.attempt_id = t.latest_attempt->>'attemptId'),
    last_duration_ms = (SELECT floor(extract(epoch FROM a.finished_at - a.started_at) * 1000)
                        FROM attempt_summary a
                        WHERE a.task_id = t.task_id AND a.started_at IS NOT NULL
                          AND a.finished_at IS NOT NULL
                        ORDER BY a.retry_index DESC LIMIT 1)
WHERE t.latest_attempt IS NOT NULL;
