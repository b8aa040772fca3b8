-- A session belongs to a tenant (issue 26 item 6): its live sessions (with a volume, not
-- evicted) count toward SVC_MAX_SESSIONS_PER_TENANT, counted through this index. Sessions
-- recorded before it belong to the tenant '' (the one of POST /sessions without a principal).

ALTER TABLE session_summary ADD COLUMN tenant_id text NOT NULL DEFAULT '';
CREATE INDEX session_summary_tenant_live ON session_summary (tenant_id)
    WHERE storage_kind = 'volume';
