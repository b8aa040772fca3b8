-- The runner's startup event (its work-ready capability summary, SPEC 2.11 and 6), per run.
ALTER TABLE run_record ADD COLUMN runner_startup json;
