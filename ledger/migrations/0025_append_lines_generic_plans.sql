-- A runner's batch of lines is planned once per connection, not at every call (issue 29, the
-- fleet's cost). The service's read pools force custom plans (their optional-filter reads
-- need them, ledger/database.py), and PL/pgSQL's statements follow that setting: each batch
-- planned the function's half-dozen statements anew, a third of Postgres's CPU per batch
-- under a fleet of printing jobs (1.15 -> 0.76 ms, measured). Each of them finds its rows by
-- key (a lease, a head, a source row) or inserts, so one generic plan serves every call.
ALTER FUNCTION session_lines_append(text, text, timestamptz, text, text, text, bigint, text[],
                                   integer[], integer[], bigint, bigint)
    SET plan_cache_mode = force_generic_plan;
