-- A runner's batch of lines in one round trip (issue 29, the fleet's cost): under a fleet each
-- live job sends a batch a second, and the batch took about ten round trips (the lease row's
-- token, BEGIN, the head, its lock, the source row, the channel's bytes, the lines, the head,
-- the source row, COMMIT). This function does them in one statement, with the semantics of
-- ledger/session_lines.py `append_batch`, which stays the path of the rare batch that crosses
-- a job channel's bound (its notice is decided in Python, in one place).
--
-- Given a token's hash (`token_hash`), it first renews the job's lease row if the row holds
-- that token (a batch accepted under a held token proves the runner alive, as a heartbeat
-- does; `renewals` counts heartbeats only and is left alone) and takes the row's session; a
-- row that does not hold it answers 'unheld' and nothing is written (the caller checks the
-- token against the job's stream, then calls again with the session and no hash). The row
-- lets go of the token at the job's exit and goes at its end, so an exited or ended job's
-- token never finds it.
--
-- Then, under the lock on the session's head row for the channel (held to commit): a batch at
-- or below the one taken answers 'taken'; a gap answers 'gap' with the batch expected; a batch
-- whose bytes (each line's UTF-8 length and its newline: `batch_bytes`, from the caller) would
-- take the job's channel (both streams) past `max_bytes` answers 'bound' and writes nothing;
-- otherwise its lines get the seqs after the head and it answers 'stored'.
CREATE FUNCTION session_lines_append(
    job_id text, token_hash text, seen_at timestamptz, for_session text, line_channel text,
    line_stream text, batch bigint, texts text[], part_numbers integer[],
    part_counts integer[], batch_bytes bigint, max_bytes bigint,
    OUT outcome text, OUT expected_seq bigint, OUT held_session text)
LANGUAGE plpgsql AS $$
DECLARE
    source_channel text := CASE WHEN line_stream = 'stdout' THEN line_channel
                                ELSE line_channel || ':' || line_stream END;
    head_seq bigint;
    taken bigint := 0;
    received bigint := 0;
    pieces integer := coalesce(array_length(texts, 1), 0);
BEGIN
    held_session := for_session;
    IF token_hash IS NOT NULL THEN
        UPDATE runner_job_leases AS l SET last_seen = greatest(l.last_seen, seen_at)
        WHERE l.runner_job_id = job_id AND l.token_sha256 = token_hash
          AND l.session_id IS NOT NULL
        RETURNING l.session_id INTO held_session;
        IF NOT FOUND THEN
            outcome := 'unheld';
            RETURN;
        END IF;
    END IF;
    INSERT INTO session_line_head (session_id, channel, last_seq)
    VALUES (held_session, line_channel, 0) ON CONFLICT (session_id, channel) DO NOTHING;
    SELECT h.last_seq INTO head_seq FROM session_line_head AS h
    WHERE h.session_id = held_session AND h.channel = line_channel FOR UPDATE;
    SELECT s.batch_seq, s.byte_offset INTO taken, received FROM session_line_source AS s
    WHERE s.runner_job_id = job_id AND s.channel = source_channel;
    taken := coalesce(taken, 0);
    received := coalesce(received, 0);
    IF batch <= taken THEN
        outcome := 'taken';
        RETURN;
    END IF;
    IF batch <> taken + 1 THEN
        outcome := 'gap';
        expected_seq := taken + 1;
        RETURN;
    END IF;
    IF max_bytes IS NOT NULL AND batch_bytes + (
            SELECT coalesce(sum(s.byte_offset), 0) FROM session_line_source AS s
            WHERE s.runner_job_id = job_id
              AND (s.channel = line_channel OR s.channel = line_channel || ':stderr'))
            > max_bytes THEN
        outcome := 'bound';
        RETURN;
    END IF;
    IF pieces > 0 THEN
        INSERT INTO session_line (session_id, channel, seq, runner_job_id, line, recorded_at,
                                  stream, part, parts)
        SELECT held_session, line_channel, head_seq + t.n, job_id, t.l, now(), line_stream,
               t.p, t.c
        FROM unnest(texts, part_numbers, part_counts) WITH ORDINALITY AS t(l, p, c, n);
        UPDATE session_line_head AS h SET last_seq = head_seq + pieces
        WHERE h.session_id = held_session AND h.channel = line_channel;
    END IF;
    INSERT INTO session_line_source AS s (runner_job_id, channel, byte_offset, batch_seq)
    VALUES (job_id, source_channel, received + batch_bytes, batch)
    ON CONFLICT (runner_job_id, channel)
    DO UPDATE SET batch_seq = EXCLUDED.batch_seq, byte_offset = EXCLUDED.byte_offset;
    outcome := 'stored';
END
$$;

-- Functions are executable by PUBLIC unless revoked; said outright for the service's group
-- role (migration 0006) in case a DBA revokes PUBLIC's right by default.
GRANT EXECUTE ON FUNCTION session_lines_append(text, text, timestamptz, text, text, text,
    bigint, text[], integer[], integer[], bigint, bigint) TO svc_app;
