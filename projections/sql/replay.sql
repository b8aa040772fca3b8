-- name: create_scratch
CREATE TEMP TABLE task_summary (LIKE public.task_summary INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE task_contract (LIKE public.task_contract INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE read_cursor (LIKE public.read_cursor INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE queue_stats (LIKE public.queue_stats INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE commander_view (LIKE public.commander_view INCLUDING DEFAULTS) ON COMMIT DROP;

-- JSON columns are compared as text: live and rebuilt values are encoded by the same code
-- from the same events, so equal values have equal text.

-- name: diff_task_summary
WITH live AS (SELECT task_id, tenant_id, project_id, queue, lane, title, priority, state,
                     backend_profile, summary, version, change_seq, payload_hash,
                     latest_attempt::text, session_path, creator, created_at, updated_at
              FROM public.task_summary),
  rebuilt AS (SELECT task_id, tenant_id, project_id, queue, lane, title, priority, state,
                     backend_profile, summary, version, change_seq, payload_hash,
                     latest_attempt::text, session_path, creator, created_at, updated_at
              FROM pg_temp.task_summary)
SELECT task_id AS key FROM ((TABLE live EXCEPT ALL TABLE rebuilt)
                            UNION ALL (TABLE rebuilt EXCEPT ALL TABLE live)) d

-- name: diff_task_contract
WITH live AS (SELECT task_id, contract::text FROM public.task_contract),
  rebuilt AS (SELECT task_id, contract::text FROM pg_temp.task_contract)
SELECT task_id AS key FROM ((TABLE live EXCEPT ALL TABLE rebuilt)
                            UNION ALL (TABLE rebuilt EXCEPT ALL TABLE live)) d

-- name: diff_read_cursor
SELECT reader_id || '/' || task_id AS key FROM (
    (SELECT * FROM public.read_cursor EXCEPT ALL SELECT * FROM pg_temp.read_cursor)
    UNION ALL
    (SELECT * FROM pg_temp.read_cursor EXCEPT ALL SELECT * FROM public.read_cursor)) d

-- name: diff_queue_stats
WITH live AS (SELECT * FROM public.queue_stats WHERE task_count <> 0),
     rebuilt AS (SELECT * FROM pg_temp.queue_stats WHERE task_count <> 0)
SELECT concat_ws('/', queue, lane, state, backend_profile) AS key
FROM ((TABLE live EXCEPT ALL TABLE rebuilt) UNION ALL (TABLE rebuilt EXCEPT ALL TABLE live)) d

-- name: diff_commander_view
SELECT task_id AS key FROM (
    (SELECT * FROM public.commander_view EXCEPT ALL SELECT * FROM pg_temp.commander_view)
    UNION ALL
    (SELECT * FROM pg_temp.commander_view EXCEPT ALL SELECT * FROM public.commander_view)) d

-- name: replace_live
DELETE FROM public.task_summary;
INSERT INTO public.task_summary SELECT * FROM pg_temp.task_summary;
DELETE FROM public.task_contract;
INSERT INTO public.task_contract SELECT * FROM pg_temp.task_contract;
DELETE FROM public.read_cursor;
INSERT INTO public.read_cursor SELECT * FROM pg_temp.read_cursor;
DELETE FROM public.queue_stats;
INSERT INTO public.queue_stats SELECT * FROM pg_temp.queue_stats WHERE task_count <> 0;
DELETE FROM public.commander_view;
INSERT INTO public.commander_view SELECT * FROM pg_temp.commander_view;
