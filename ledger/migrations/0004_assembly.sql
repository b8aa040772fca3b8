-- The runner job's value-free plan and the runner's bounded assembly event, per run.
ALTER TABLE run_record ADD COLUMN job_plan json, ADD COLUMN assembly json;
CREATE INDEX attempt_summary_run ON attempt_summary (run_id);
