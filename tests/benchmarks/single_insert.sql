-- Baseline: one single-row INSERT per transaction.
\set n random(1, 9000000000000000000)
INSERT INTO bench_insert (id, payload) VALUES (:n, 'benchmark payload');
