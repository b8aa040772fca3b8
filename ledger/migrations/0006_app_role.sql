-- Least privilege (DESIGN 8): the service serves as a member of the group role svc_app, which
-- may read everything, append to the ledger, advance its head and write projections, but never
-- update, delete or truncate ledger entries, nor alter a table or its triggers (only the owner,
-- the role that runs these migrations, can). A DBA may create svc_app beforehand; otherwise it
-- is created here as a group role (NOLOGIN).

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'svc_app') THEN
        CREATE ROLE svc_app NOLOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;  -- created concurrently by another database's migration
END
$$;

GRANT USAGE ON SCHEMA public TO svc_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO svc_app;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO svc_app;
REVOKE UPDATE, DELETE ON ledger FROM svc_app;
REVOKE INSERT, DELETE ON ledger_head FROM svc_app;
REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM svc_app;

-- Tables of later migrations (projections) get the same rights without a grant of their own.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO svc_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO svc_app;
