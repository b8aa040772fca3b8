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
