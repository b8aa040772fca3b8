-- name: load_tasks
SELECT task_id, tenant_id, project_id, queue, lane, title, priority, state, backend_profile,
       summary, version, change_seq, payload_hash, latest_attempt::text AS latest_attempt,
       session_path, creator, created_at, updated_at
FROM task_summary WHERE task_id = ANY($1::text[])

-- name: upsert_tasks
INSERT INTO task_summary (task_id, tenant_id, project_id, queue, lane, title, priority, state,
                          backend_profile, summary, version, change_seq, payload_hash,
                          latest_attempt, session_path, creator, created_at, updated_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::integer[], $8::text[], $9::text[], $10::text[], $11::integer[],
                     $12::bigint[], $13::text[], $14::json[], $15::text[],
                     $16::text[], $17::timestamptz[], $18::timestamptz[])
ON CONFLICT (task_id) DO UPDATE SET
    state = EXCLUDED.state, backend_profile = EXCLUDED.backend_profile,
    summary = EXCLUDED.summary, version = EXCLUDED.version, change_seq = EXCLUDED.change_seq,
    latest_attempt = EXCLUDED.latest_attempt, session_path = EXCLUDED.session_path,
    updated_at = EXCLUDED.updated_at

-- name: insert_contracts
INSERT INTO task_contract (task_id, contract)
SELECT * FROM unnest($1::text[], $2::json[])
ON CONFLICT (task_id) DO NOTHING

-- name: upsert_commander
INSERT INTO commander_view (task_id, queue, attention, change_seq, phase, recovery)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::text[], $6::text[])
ON CONFLICT (task_id) DO UPDATE SET
    attention = EXCLUDED.attention, change_seq = EXCLUDED.change_seq,
    phase = EXCLUDED.phase, recovery = EXCLUDED.recovery

-- name: upsert_cursors
INSERT INTO read_cursor (reader_id, task_id, version, change_seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[])
ON CONFLICT (reader_id, task_id) DO UPDATE SET
    version = EXCLUDED.version, change_seq = EXCLUDED.change_seq

-- name: add_stats
INSERT INTO queue_stats (queue, lane, state, backend_profile, task_count)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[])
ON CONFLICT (queue, lane, state, backend_profile) DO UPDATE SET
    task_count = queue_stats.task_count + EXCLUDED.task_count

-- name: load_attempts
SELECT attempt_id, task_id, retry_index, state, idempotency_key, reason, previous_attempt_id,
       run_id, command_id, runner_job_id, session_id, backend_profile, failure_kind,
       failure_message, exit_code, change_seq, created_at, started_at, finished_at, updated_at
FROM attempt_summary WHERE attempt_id = ANY($1::text[])

-- name: upsert_attempts
INSERT INTO attempt_summary (attempt_id, task_id, retry_index, state, idempotency_key, reason,
                             previous_attempt_id, run_id, command_id, runner_job_id,
                             session_id, backend_profile, failure_kind, failure_message,
                             exit_code, change_seq, created_at, started_at, finished_at,
                             updated_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::text[],
                     $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::text[], $13::text[], $14::text[], $15::integer[], $16::bigint[],
                     $17::timestamptz[], $18::timestamptz[], $19::timestamptz[],
                     $20::timestamptz[])
ON CONFLICT (attempt_id) DO UPDATE SET
    state = EXCLUDED.state, failure_kind = EXCLUDED.failure_kind,
    failure_message = EXCLUDED.failure_message, exit_code = EXCLUDED.exit_code,
    change_seq = EXCLUDED.change_seq, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at, updated_at = EXCLUDED.updated_at

-- name: load_runs
SELECT run_id, task_id, attempt_id, command_id, runner_job_id, session_id, conversation_id,
       backend_profile, status, exit_code, failure_kind, failure_message, driver, handle,
       resource_bundle_ref::text AS resource_bundle_ref, prompt_sha256, prompt_bytes,
       created_at, started_at, finished_at, change_seq, job_plan::text AS job_plan,
       assembly::text AS assembly, base::text AS base
FROM run_record WHERE run_id = ANY($1::text[])

-- name: upsert_runs
INSERT INTO run_record (run_id, task_id, attempt_id, command_id, runner_job_id, session_id,
                        conversation_id, backend_profile, status, exit_code, failure_kind,
                        failure_message, driver, handle, resource_bundle_ref, prompt_sha256,
                        prompt_bytes, created_at, started_at, finished_at, change_seq,
                        job_plan, assembly, base)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::integer[], $11::text[],
                     $12::text[], $13::text[], $14::text[], $15::json[], $16::text[],
                     $17::integer[], $18::timestamptz[], $19::timestamptz[],
                     $20::timestamptz[], $21::bigint[], $22::json[], $23::json[], $24::json[])
ON CONFLICT (run_id) DO UPDATE SET
    status = EXCLUDED.status, exit_code = EXCLUDED.exit_code,
    failure_kind = EXCLUDED.failure_kind, failure_message = EXCLUDED.failure_message,
    driver = EXCLUDED.driver, handle = EXCLUDED.handle, started_at = EXCLUDED.started_at,
    finished_at = EXCLUDED.finished_at, change_seq = EXCLUDED.change_seq,
    job_plan = EXCLUDED.job_plan, assembly = EXCLUDED.assembly

-- name: upsert_commands
INSERT INTO command_record (command_id, run_id, status, created_at, finished_at, change_seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[],
                     $5::timestamptz[], $6::bigint[])
ON CONFLICT (command_id) DO UPDATE SET
    status = EXCLUDED.status, finished_at = EXCLUDED.finished_at,
    change_seq = EXCLUDED.change_seq

-- name: upsert_jobs
INSERT INTO runner_job_record (runner_job_id, run_id, driver, handle, status, created_at,
                               started_at, finished_at, change_seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                     $6::timestamptz[], $7::timestamptz[], $8::timestamptz[], $9::bigint[])
ON CONFLICT (runner_job_id) DO UPDATE SET
    driver = EXCLUDED.driver, handle = EXCLUDED.handle, status = EXCLUDED.status,
    started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at,
    change_seq = EXCLUDED.change_seq

-- name: load_sessions
SELECT session_id, conversation_id, backend_profile, state, thread_id, storage_kind, pvc_name,
       pvc_phase, storage_size_bytes, storage_files_count, storage_sha256, storage_updated_at,
       ttl_seconds, expires_at, run_id, latest_run_id, latest_command_id,
       latest_runner_job_id, latest_task_id, turns, failure_kind, version, change_seq,
       creator, created_at, updated_at
FROM session_summary WHERE session_id = ANY($1::text[])

-- name: upsert_sessions
INSERT INTO session_summary (session_id, conversation_id, backend_profile, state, thread_id,
                             storage_kind, pvc_name, pvc_phase, storage_size_bytes,
                             storage_files_count, storage_sha256, storage_updated_at,
                             ttl_seconds, expires_at, run_id, latest_run_id,
                             latest_command_id, latest_runner_job_id, latest_task_id, turns,
                             failure_kind, version, change_seq, creator, created_at,
                             updated_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::bigint[], $10::integer[], $11::text[],
                     $12::timestamptz[], $13::integer[], $14::timestamptz[], $15::text[],
                     $16::text[], $17::text[], $18::text[], $19::text[], $20::integer[],
                     $21::text[], $22::integer[], $23::bigint[], $24::text[],
                     $25::timestamptz[], $26::timestamptz[])
ON CONFLICT (session_id) DO UPDATE SET
    state = EXCLUDED.state, thread_id = EXCLUDED.thread_id,
    storage_kind = EXCLUDED.storage_kind, pvc_name = EXCLUDED.pvc_name,
    pvc_phase = EXCLUDED.pvc_phase, storage_size_bytes = EXCLUDED.storage_size_bytes,
    storage_files_count = EXCLUDED.storage_files_count,
    storage_sha256 = EXCLUDED.storage_sha256,
    storage_updated_at = EXCLUDED.storage_updated_at, expires_at = EXCLUDED.expires_at,
    latest_run_id = EXCLUDED.latest_run_id, latest_command_id = EXCLUDED.latest_command_id,
    latest_runner_job_id = EXCLUDED.latest_runner_job_id,
    latest_task_id = EXCLUDED.latest_task_id, turns = EXCLUDED.turns,
    failure_kind = EXCLUDED.failure_kind, version = EXCLUDED.version,
    change_seq = EXCLUDED.change_seq, updated_at = EXCLUDED.updated_at

-- name: load_turns
SELECT runner_job_id, session_id, run_id, command_id, task_id, thread_id, status,
       result_thread_id, driver, handle, failure_kind, failure_message, exit_code,
       prompt_sha256, prompt_bytes, change_seq, created_at, started_at, finished_at
FROM session_turn WHERE runner_job_id = ANY($1::text[])

-- name: upsert_turns
INSERT INTO session_turn (runner_job_id, session_id, run_id, command_id, task_id, thread_id,
                          status, result_thread_id, driver, handle, failure_kind,
                          failure_message, exit_code, prompt_sha256, prompt_bytes,
                          change_seq, created_at, started_at, finished_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::text[], $13::integer[], $14::text[], $15::integer[], $16::bigint[],
                     $17::timestamptz[], $18::timestamptz[], $19::timestamptz[])
ON CONFLICT (runner_job_id) DO UPDATE SET
    status = EXCLUDED.status, result_thread_id = EXCLUDED.result_thread_id,
    driver = EXCLUDED.driver, handle = EXCLUDED.handle,
    failure_kind = EXCLUDED.failure_kind, failure_message = EXCLUDED.failure_message,
    exit_code = EXCLUDED.exit_code, change_seq = EXCLUDED.change_seq,
    started_at = EXCLUDED.started_at, finished_at = EXCLUDED.finished_at

-- name: upsert_session_cursors
INSERT INTO session_read_cursor (reader_id, session_id, version, change_seq)
SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[])
ON CONFLICT (reader_id, session_id) DO UPDATE SET
    version = EXCLUDED.version, change_seq = EXCLUDED.change_seq
