-- A lease row keeps the session of its job (issue 29's fleet): a batch of lines sent with the
-- token the row holds goes to that session without folding the job's stream again, as the
-- next heartbeat with it does. The session comes from the job's stream when a heartbeat
-- takes the full decision; the row lets go of the token at the job's exit and goes at its
-- end, so a token the ledger would refuse never finds it.
ALTER TABLE runner_job_leases ADD COLUMN session_id text;
