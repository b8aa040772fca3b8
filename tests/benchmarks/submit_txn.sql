-- The SQL transaction one HTTP submit performs (group of one), for pgbench.
\set n random(1, 9000000000000000000)
BEGIN;
UPDATE ledger_head SET last_seq = last_seq + 1,
       last_hash = '\x1111111111111111111111111111111111111111111111111111111111111111'
 WHERE id = 1 RETURNING last_seq AS seq \gset
INSERT INTO ledger (change_seq, stream_type, stream_id, stream_version, event_type, payload,
                    actor, recorded_at, prev_hash, hash)
VALUES (:seq, 'task', 'tsk_b' || :n, 1, 'task-submitted',
        '{"type": "task-submitted","task_id": "tsk_b","tenant_id": "bench","project_id": "bench","queue": "bench","lane": "default","title": "bench","priority": 50,"backend_profile": null,"contract": {"tenantId": "bench","projectId": "bench","queue": "bench","title": "bench","payload": {"prompt": "benchmark prompt"},"priority": 50},"payload_hash": "0000000000000000000000000000000000000000000000000000000000000000","creator": "api"}',
        'api', now(),
        '\x2222222222222222222222222222222222222222222222222222222222222222',
        '\x3333333333333333333333333333333333333333333333333333333333333333');
INSERT INTO task_summary (task_id, tenant_id, project_id, queue, lane, title, priority, state,
                          backend_profile, summary, version, change_seq, payload_hash,
                          latest_attempt, creator, created_at, updated_at)
VALUES ('tsk_b' || :n, 'bench', 'bench', 'bench', 'default', 'bench', 50, 'pending', NULL,
        'submitted; waiting for dispatch', 1, :seq,
        '0000000000000000000000000000000000000000000000000000000000000000',
        NULL, 'api', now(), now())
ON CONFLICT (task_id) DO UPDATE SET state = EXCLUDED.state, version = EXCLUDED.version,
       change_seq = EXCLUDED.change_seq, updated_at = EXCLUDED.updated_at;
INSERT INTO task_contract (task_id, contract)
VALUES ('tsk_b' || :n, '{"tenantId": "bench", "projectId": "bench", "queue": "bench", "title": "bench", "payload": {"prompt": "benchmark prompt"}, "priority": 50}')
ON CONFLICT (task_id) DO NOTHING;
INSERT INTO commander_view (task_id, queue, attention, change_seq, phase, recovery,
                            tenant_id, project_id)
VALUES ('tsk_b' || :n, 'bench', 3, :seq, 'awaiting-dispatch', 'dispatch', 'bench', 'bench')
ON CONFLICT (task_id) DO UPDATE SET attention = EXCLUDED.attention,
       change_seq = EXCLUDED.change_seq;
INSERT INTO queue_stats (queue, lane, state, backend_profile, task_count, tenant_id,
                         project_id)
VALUES ('bench', 'default', 'pending', '', 1, 'bench', 'bench')
ON CONFLICT (queue, lane, state, backend_profile, tenant_id, project_id) DO UPDATE SET
       task_count = queue_stats.task_count + EXCLUDED.task_count;
COMMIT;
SELECT t.task_id, state, version, change_seq, c.contract::text
  FROM task_summary t JOIN task_contract c USING (task_id) WHERE t.task_id = 'tsk_b' || :n;
