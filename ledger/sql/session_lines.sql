-- name: ensure_head
INSERT INTO session_line_head (session_id, channel, last_seq) VALUES ($1, $2, 0)
ON CONFLICT (session_id, channel) DO NOTHING

-- name: lock_head
SELECT last_seq FROM session_line_head WHERE session_id = $1 AND channel = $2 FOR UPDATE

-- name: source_offset
SELECT byte_offset FROM session_line_source WHERE runner_job_id = $1 AND channel = $2

-- name: insert_lines
INSERT INTO session_line (session_id, channel, seq, runner_job_id, line, recorded_at)
SELECT $1, $2, s, $3, l, now() FROM unnest($4::bigint[], $5::text[]) AS t(s, l)

-- name: insert_pieces
INSERT INTO session_line (session_id, channel, seq, runner_job_id, line, recorded_at, stream,
                          part, parts)
SELECT $1, $2, s, $3, l, now(), $6, p, n
FROM unnest($4::bigint[], $5::text[], $7::integer[], $8::integer[]) AS t(s, l, p, n)

-- name: channel_received
SELECT coalesce(sum(byte_offset), 0) FROM session_line_source
WHERE runner_job_id = $1 AND (channel = $2 OR channel = $2 || ':stderr')

-- name: save_offset
INSERT INTO session_line_source (runner_job_id, channel, byte_offset) VALUES ($1, $2, $3)
ON CONFLICT (runner_job_id, channel) DO UPDATE SET byte_offset = EXCLUDED.byte_offset

-- name: save_head
UPDATE session_line_head SET last_seq = $3 WHERE session_id = $1 AND channel = $2

-- name: page
SELECT seq, runner_job_id, line, recorded_at, stream, part, parts FROM (
    SELECT seq, runner_job_id, line, recorded_at, stream, part, parts,
           sum(octet_length(line)) OVER (ORDER BY seq) - octet_length(line) AS before
    FROM (SELECT * FROM session_line
          WHERE session_id = $1 AND channel = $2 AND seq > $3 ORDER BY seq LIMIT $4) AS taken
) AS counted
WHERE before < $5 ORDER BY seq

-- name: last_seq
SELECT coalesce(max(last_seq), 0) FROM session_line_head WHERE session_id = $1 AND channel = $2

-- name: source_batch
SELECT batch_seq, byte_offset FROM session_line_source WHERE runner_job_id = $1 AND channel = $2

-- name: save_batch
INSERT INTO session_line_source (runner_job_id, channel, byte_offset, batch_seq)
VALUES ($1, $2, $4, $3)
ON CONFLICT (runner_job_id, channel)
DO UPDATE SET batch_seq = EXCLUDED.batch_seq, byte_offset = EXCLUDED.byte_offset

-- name: append
SELECT outcome, expected_seq, held_session
FROM session_lines_append($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)

-- name: append_held_group
-- Batches under held tokens (ledger/grouped.py), each appended as `append` would, in the
-- order given, in one statement and one commit. Batch i's pieces are elements
-- first[i]..last[i] of the piece arrays (last < first: none). A lock waited for longer than
-- $14 fails the statement (`lock_timeout`, for this transaction only): the group's batches
-- are then appended one by one, so one blocked job does not hold up the others.
WITH limits AS MATERIALIZED (SELECT set_config('lock_timeout', $14, true))
SELECT a.outcome, a.expected_seq, a.held_session
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::bigint[],
            $7::integer[], $8::integer[], $9::bigint[])
     WITH ORDINALITY AS b(job_id, token_hash, seen_at, channel, stream, batch, first, last,
                          batch_bytes, n)
CROSS JOIN LATERAL session_lines_append(
    b.job_id, b.token_hash, b.seen_at, NULL, b.channel, b.stream, b.batch,
    ($10::text[])[b.first:b.last], ($11::integer[])[b.first:b.last],
    ($12::integer[])[b.first:b.last], b.batch_bytes, $13) AS a
WHERE EXISTS (SELECT FROM limits)
ORDER BY b.n
