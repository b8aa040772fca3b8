-- An attempt keeps the token usage its backend reported (issue 27 item 2, docs/backends.md):
-- the counts of the job's exit report, folded from task-attempt-finished. NULL when the job
-- reported none (every attempt ended before this migration); stats sum them at read time.
ALTER TABLE attempt_summary
    ADD COLUMN input_tokens bigint,
    ADD COLUMN cached_input_tokens bigint,
    ADD COLUMN output_tokens bigint,
    ADD COLUMN reasoning_output_tokens bigint;
-- The stats and /metrics sum them over the attempts that have some: a partial index finds those.
CREATE INDEX attempt_summary_usage ON attempt_summary (task_id) WHERE input_tokens IS NOT NULL;
