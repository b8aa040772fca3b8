-- name: lock_head
SELECT last_seq, last_hash, epoch FROM ledger_head WHERE id = 1 FOR UPDATE

-- name: advance_head
SELECT * FROM ledger_advance($1::bigint, $2::bigint, $3::bytea[])

-- name: next_epoch
UPDATE ledger_head SET epoch = epoch + 1 WHERE id = 1

-- name: head
SELECT last_seq, last_hash, epoch FROM ledger_head WHERE id = 1

-- name: insert_entries
INSERT INTO ledger (change_seq, stream_type, stream_id, stream_version, event_type,
                    payload, actor, recorded_at, prev_hash, hash)
SELECT a.base + e.n, e.stream_type, e.stream_id, e.stream_version, e.event_type, e.payload,
       e.actor, e.recorded_at, CASE WHEN e.n = 1 THEN a.prev ELSE a.hashes[e.n::int - 1] END,
       a.hashes[e.n::int]
FROM a, unnest($1::text[], $2::text[], $3::integer[], $4::text[], $5::json[], $6::text[],
               $7::timestamptz[]) WITH ORDINALITY
        AS e(stream_type, stream_id, stream_version, event_type, payload, actor, recorded_at, n)

-- name: read_streams
SELECT change_seq, stream_type, stream_id, stream_version, event_type, payload::text AS payload,
       actor, recorded_at
FROM ledger
WHERE stream_id = ANY($1::text[])
ORDER BY stream_id, stream_version

-- name: read_all_by_stream
SELECT change_seq, stream_type, stream_id, stream_version, event_type, payload::text AS payload,
       actor, recorded_at
FROM ledger
ORDER BY stream_id, stream_version

-- name: read_all_by_seq
SELECT change_seq, stream_type, stream_id, stream_version, event_type, payload::text AS payload,
       actor, recorded_at, prev_hash, hash
FROM ledger
ORDER BY change_seq

-- name: hash_at
SELECT hash FROM ledger WHERE change_seq = $1
