-- name: create_scratch
CREATE TEMP TABLE task_summary (LIKE public.task_summary INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE task_contract (LIKE public.task_contract INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE read_cursor (LIKE public.read_cursor INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE queue_stats (LIKE public.queue_stats INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE commander_view (LIKE public.commander_view INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE attempt_summary (LIKE public.attempt_summary INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE run_record (LIKE public.run_record INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE command_record (LIKE public.command_record INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE runner_job_record (LIKE public.runner_job_record INCLUDING DEFAULTS)
    ON COMMIT DROP;
CREATE TEMP TABLE session_summary (LIKE public.session_summary INCLUDING DEFAULTS)
    ON COMMIT DROP;
CREATE TEMP TABLE session_turn (LIKE public.session_turn INCLUDING DEFAULTS) ON COMMIT DROP;
CREATE TEMP TABLE session_read_cursor (LIKE public.session_read_cursor INCLUDING DEFAULTS)
    ON COMMIT DROP;

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
DELETE FROM public.attempt_summary;
INSERT INTO public.attempt_summary SELECT * FROM pg_temp.attempt_summary;
DELETE FROM public.run_record;
INSERT INTO public.run_record SELECT * FROM pg_temp.run_record;
DELETE FROM public.command_record;
INSERT INTO public.command_record SELECT * FROM pg_temp.command_record;
DELETE FROM public.runner_job_record;
INSERT INTO public.runner_job_record SELECT * FROM pg_temp.runner_job_record;
DELETE FROM public.session_summary;
INSERT INTO public.session_summary SELECT * FROM pg_temp.session_summary;
DELETE FROM public.session_turn;
INSERT INTO public.session_turn SELECT * FROM pg_temp.session_turn;
DELETE FROM public.session_read_cursor;
INSERT INTO public.session_read_cursor SELECT * FROM pg_temp.session_read_cursor;

-- name: diff_attempt_summary
SELECT attempt_id AS key FROM (
    (SELECT * FROM public.attempt_summary EXCEPT ALL SELECT * FROM pg_temp.attempt_summary)
    UNION ALL
    (SELECT * FROM pg_temp.attempt_summary EXCEPT ALL SELECT * FROM public.attempt_summary)) d

-- name: diff_run_record
WITH live AS (SELECT run_id, task_id, attempt_id, command_id, runner_job_id, session_id,
                     conversation_id, backend_profile, status, exit_code, failure_kind,
                     failure_message, driver, handle, resource_bundle_ref::text, prompt_sha256,
                     prompt_bytes, created_at, started_at, finished_at, change_seq,
                     job_plan::text, assembly::text, base::text
              FROM public.run_record),
  rebuilt AS (SELECT run_id, task_id, attempt_id, command_id, runner_job_id, session_id,
                     conversation_id, backend_profile, status, exit_code, failure_kind,
                     failure_message, driver, handle, resource_bundle_ref::text, prompt_sha256,
                     prompt_bytes, created_at, started_at, finished_at, change_seq,
                     job_plan::text, assembly::text, base::text
              FROM pg_temp.run_record)
SELECT run_id AS key FROM ((TABLE live EXCEPT ALL TABLE rebuilt)
                           UNION ALL (TABLE rebuilt EXCEPT ALL TABLE live)) d

-- name: diff_command_record
SELECT command_id AS key FROM (
    (SELECT * FROM public.command_record EXCEPT ALL SELECT * FROM pg_temp.command_record)
    UNION ALL
    (SELECT * FROM pg_temp.command_record EXCEPT ALL SELECT * FROM public.command_record)) d

-- name: diff_runner_job_record
SELECT runner_job_id AS key FROM (
    (SELECT * FROM public.runner_job_record EXCEPT ALL
     SELECT * FROM pg_temp.runner_job_record)
    UNION ALL
    (SELECT * FROM pg_temp.runner_job_record EXCEPT ALL
     SELECT * FROM public.runner_job_record)) d

-- name: diff_session_summary
SELECT session_id AS key FROM (
    (SELECT * FROM public.session_summary EXCEPT ALL SELECT * FROM pg_temp.session_summary)
    UNION ALL
    (SELECT * FROM pg_temp.session_summary EXCEPT ALL SELECT * FROM public.session_summary)) d

-- name: diff_session_turn
SELECT runner_job_id AS key FROM (
    (SELECT * FROM public.session_turn EXCEPT ALL SELECT * FROM pg_temp.session_turn)
    UNION ALL
    (SELECT * FROM pg_temp.session_turn EXCEPT ALL SELECT * FROM public.session_turn)) d

-- name: diff_session_read_cursor
SELECT reader_id || '/' || session_id AS key FROM (
    (SELECT * FROM public.session_read_cursor EXCEPT ALL SELECT * FROM pg_temp.session_read_cursor)
    UNION ALL
    (SELECT * FROM pg_temp.session_read_cursor EXCEPT ALL SELECT * FROM public.session_read_cursor)) d
