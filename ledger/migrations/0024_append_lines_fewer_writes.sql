-- A runner's batch of lines with fewer row writes (issue 29, the fleet's cost): under a fleet
-- every live job sends a batch a second, and Postgres spent about three times a heartbeat's
-- CPU on one. The batch (migration 0023) wrote the head row three times (an insert that found
-- it, a lock, the update) and the source row through an insert that found it. Now, where the
-- rows exist (every batch after a channel's first):
--
-- * the head row is locked by the update that takes the batch's seqs (`last_seq` moved by its
--   line count, the old value kept); a batch refused after it ('taken', 'gap', 'bound') moves
--   it back under the same lock, so a refusal leaves the head as it was;
-- * the source row is updated in place; only a channel's first batch inserts either row.
--
-- The semantics are those of 0023 (and of ledger/session_lines.py `append_batch`): the lease
-- renewal under a held token, then under the lock on the session's head row for the channel
-- (held to commit) a batch at or below the one taken answers 'taken', a gap 'gap' with the
-- batch expected, a batch past the job channel's bound 'bound' (nothing written), else its
-- lines get the seqs after the head and it answers 'stored'.
CREATE OR REPLACE FUNCTION session_lines_append(
    job_id text, token_hash text, seen_at timestamptz, for_session text, line_channel text,
    line_stream text, batch bigint, texts text[], part_numbers integer[],
    part_counts integer[], batch_bytes bigint, max_bytes bigint,
    OUT outcome text, OUT expected_seq bigint, OUT held_session text)
LANGUAGE plpgsql AS $$
DECLARE
    source_channel text := CASE WHEN line_stream = 'stdout' THEN line_channel
                                ELSE line_channel || ':' || line_stream END;
    pieces integer := coalesce(array_length(texts, 1), 0);
    head_seq bigint;
    taken bigint;
    received bigint;
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
    UPDATE session_line_head AS h SET last_seq = h.last_seq + pieces
    WHERE h.session_id = held_session AND h.channel = line_channel
    RETURNING h.last_seq - pieces INTO head_seq;
    IF NOT FOUND THEN  -- the channel's first batch (or one racing it): make the row, lock it
        INSERT INTO session_line_head (session_id, channel, last_seq)
        VALUES (held_session, line_channel, 0) ON CONFLICT (session_id, channel) DO NOTHING;
        UPDATE session_line_head AS h SET last_seq = h.last_seq + pieces
        WHERE h.session_id = held_session AND h.channel = line_channel
        RETURNING h.last_seq - pieces INTO head_seq;
    END IF;
    SELECT s.batch_seq, s.byte_offset INTO taken, received FROM session_line_source AS s
    WHERE s.runner_job_id = job_id AND s.channel = source_channel;
    IF batch <= coalesce(taken, 0) THEN
        outcome := 'taken';
    ELSIF batch <> coalesce(taken, 0) + 1 THEN
        outcome := 'gap';
        expected_seq := coalesce(taken, 0) + 1;
    ELSIF max_bytes IS NOT NULL AND batch_bytes + (
            SELECT coalesce(sum(s.byte_offset), 0) FROM session_line_source AS s
            WHERE s.runner_job_id = job_id
              AND (s.channel = line_channel OR s.channel = line_channel || ':stderr'))
            > max_bytes THEN
        outcome := 'bound';
    END IF;
    IF outcome IS NOT NULL THEN  -- refused: the head goes back to where it was
        IF pieces > 0 THEN
            UPDATE session_line_head AS h SET last_seq = head_seq
            WHERE h.session_id = held_session AND h.channel = line_channel;
        END IF;
        RETURN;
    END IF;
    IF pieces > 0 THEN
        INSERT INTO session_line (session_id, channel, seq, runner_job_id, line, recorded_at,
                                  stream, part, parts)
        SELECT held_session, line_channel, head_seq + t.n, job_id, t.l, now(), line_stream,
               t.p, t.c
        FROM unnest(texts, part_numbers, part_counts) WITH ORDINALITY AS t(l, p, c, n);
    END IF;
    IF taken IS NULL THEN
        INSERT INTO session_line_source AS s (runner_job_id, channel, byte_offset, batch_seq)
        VALUES (job_id, source_channel, batch_bytes, batch)
        ON CONFLICT (runner_job_id, channel)
        DO UPDATE SET batch_seq = EXCLUDED.batch_seq, byte_offset = EXCLUDED.byte_offset;
    ELSE
        UPDATE session_line_source AS s
        SET batch_seq = batch, byte_offset = received + batch_bytes
        WHERE s.runner_job_id = job_id AND s.channel = source_channel;
    END IF;
    outcome := 'stored';
END
$$;
