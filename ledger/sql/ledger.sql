-- name: lock_head
SELECT last_seq, last_hash FROM ledger_head WHERE id = 1 FOR UPDATE

-- name: update_head
UPDATE ledger_head SET last_seq = $1, last_hash = $2 WHERE id = 1

-- name: head
SELECT last_seq, last_hash FROM ledger_head WHERE id = 1

-- name: insert_entries
INSERT INTO ledger (change_seq, stream_type, stream_id, stream_version, event_type,
                    payload, actor, recorded_at, prev_hash, hash)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::integer[], $5::text[],
                     $6::json[], $7::text[], $8::timestamptz[], $9::bytea[], $10::bytea[])

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
