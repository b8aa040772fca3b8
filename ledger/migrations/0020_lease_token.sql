-- A lease row keeps the hash of the runner token that last renewed it (issue 29's fleet):
-- the next heartbeat with that token renews in one statement, without folding the job's
-- stream again. The row lets go of the hash when the job reports its exit and goes when it
-- ends, so a token the ledger would refuse never finds it; any other heartbeat takes the
-- full decision as before.
ALTER TABLE runner_job_leases ADD COLUMN token_sha256 text;
