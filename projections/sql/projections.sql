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
       assembly::text AS assembly
FROM run_record WHERE run_id = ANY($1::text[])

-- name: upsert_runs
INSERT INTO run_record (run_id, task_id, attempt_id, command_id, runner_job_id, session_id,
                        conversation_id, backend_profile, status, exit_code, failure_kind,
                        failure_message, driver, handle, resource_bundle_ref, prompt_sha256,
                        prompt_bytes, created_at, started_at, finished_at, change_seq,
                        job_plan, assembly)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::integer[], $11::text[],
                     $12::text[], $13::text[], $14::text[], $15::json[], $16::text[],
                     $17::integer[], $18::timestamptz[], $19::timestamptz[],
                     $20::timestamptz[], $21::bigint[], $22::json[], $23::json[])
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
