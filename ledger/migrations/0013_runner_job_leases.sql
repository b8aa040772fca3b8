-- Liveness apart from history (issue 29): a runner's heartbeat renews its job's lease row in
-- place, one statement and no ledger entry, so it neither moves the ledger head (the polling
-- high-water mark, the read cache) nor lengthens what replay and the audit read. Claims, ends,
-- exits and `runner-lost` stay ledger events. This table is not history: `svc ledger replay`
-- neither reads nor rebuilds it, and a job without a row (a restore, a job that never beat)
-- is as silent as its last ledger event (its claim) says. A row goes when its job ends.

CREATE TABLE runner_job_leases (
    runner_job_id text PRIMARY KEY,
    last_seen timestamptz NOT NULL,
    renewals bigint NOT NULL DEFAULT 1
);
