-- Attempt identity is (taskId, attemptId) (SPEC 2.2): a caller-chosen attempt id may be used by
-- two tasks, each with its own attempt row.

ALTER TABLE attempt_summary DROP CONSTRAINT attempt_summary_pkey;
ALTER TABLE attempt_summary ADD PRIMARY KEY (task_id, attempt_id);
