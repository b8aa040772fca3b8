-- Baseline of a list page: the newest 50 rows of a copy of task_summary (same width).
SELECT * FROM bench_summary ORDER BY change_seq DESC LIMIT 50;
