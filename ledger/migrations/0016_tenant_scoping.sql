-- Tenant scoping (DESIGN 12, issue 25 item 5): lists, stats and the commander view hold the
-- caller's tenant (and projects) only, filtered in SQL. The counters and the commander rows
-- gain the tenant and project of their tasks (folded from the same task rows, so a replay
-- rebuilds them identically); rows written before this migration are recomputed from the
-- task summaries here.

ALTER TABLE queue_stats ADD COLUMN tenant_id text NOT NULL DEFAULT '',
                        ADD COLUMN project_id text NOT NULL DEFAULT '';
DELETE FROM queue_stats;
INSERT INTO queue_stats (queue, lane, state, backend_profile, task_count, tenant_id, project_id)
SELECT queue, lane, state, coalesce(backend_profile, ''), count(*), tenant_id, project_id
FROM task_summary GROUP BY queue, lane, state, coalesce(backend_profile, ''), tenant_id,
                           project_id;
ALTER TABLE queue_stats DROP CONSTRAINT queue_stats_pkey;
ALTER TABLE queue_stats ADD PRIMARY KEY (queue, lane, state, backend_profile, tenant_id,
                                         project_id);
CREATE INDEX queue_stats_tenant ON queue_stats (tenant_id, queue, lane);

ALTER TABLE commander_view ADD COLUMN tenant_id text NOT NULL DEFAULT '',
                           ADD COLUMN project_id text NOT NULL DEFAULT '';
UPDATE commander_view c SET tenant_id = t.tenant_id, project_id = t.project_id
FROM task_summary t WHERE t.task_id = c.task_id;
CREATE INDEX commander_view_tenant_rank ON commander_view (tenant_id, attention,
                                                          change_seq DESC);

CREATE INDEX task_summary_tenant_seq ON task_summary (tenant_id, change_seq);
CREATE INDEX task_summary_tenant_queue_seq ON task_summary (tenant_id, queue, change_seq);
CREATE INDEX session_summary_tenant_seq ON session_summary (tenant_id, change_seq);
