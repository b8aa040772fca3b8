-- The ledger writer appends a batch with one statement (DESIGN 3, docs/decisions.md): the
-- statement locks the head row first, numbers and hash-chains the batch's entries after the
-- head it finds, moves the head, and writes the entries and projection rows, all before its
-- implicit commit; the head lock is never held across a round trip.
--
-- A batch decided from stored rows names the head it read (`expected_seq`, `expected_epoch`)
-- and is applied only while the head is still that one. A batch that read nothing (fresh
-- tasks) names none and is numbered wherever the head is. A projection repair
-- (`svc ledger replay --repair`) replaces rows without appending, so it advances `epoch`: a
-- batch that read before the repair is never written after it.

ALTER TABLE ledger_head ADD COLUMN epoch bigint NOT NULL DEFAULT 0;

-- Entry i (1-based) gets change_seq base + i and hash sha256(prev || '[' || change_seq ||
-- tails[i]), where tails[i] is the rest of its canonical header, a newline and its payload
-- (ledger/hashing.py). `shift` is what the batch's projection rows add to their change_seq:
-- base for a batch numbered here (its rows were folded from seqs 1..n), 0 for a batch that
-- named its head (its rows carry their seqs already). No row: the head had moved.
CREATE FUNCTION ledger_advance(expected_seq bigint, expected_epoch bigint, tails bytea[])
RETURNS TABLE (base bigint, shift bigint, prev bytea, hashes bytea[], new_seq bigint,
               new_hash bytea, new_epoch bigint)
LANGUAGE plpgsql AS $$
DECLARE
    head ledger_head%ROWTYPE;
    chained bytea[] := '{}';
    tip bytea;
    seq bigint;
BEGIN
    SELECT * INTO head FROM ledger_head WHERE id = 1 FOR UPDATE;
    IF expected_seq IS NOT NULL
       AND (head.last_seq <> expected_seq OR head.epoch <> expected_epoch) THEN
        RETURN;
    END IF;
    tip := head.last_hash;
    seq := head.last_seq;
    FOR i IN 1 .. coalesce(array_length(tails, 1), 0) LOOP
        seq := seq + 1;
        tip := sha256(tip || convert_to('[' || seq::text, 'UTF8') || tails[i]);
        chained := chained || tip;
    END LOOP;
    UPDATE ledger_head SET last_seq = seq, last_hash = tip WHERE id = 1;
    base := head.last_seq;
    shift := CASE WHEN expected_seq IS NULL THEN head.last_seq ELSE 0 END;
    prev := head.last_hash;
    hashes := chained;
    new_seq := seq;
    new_hash := tip;
    new_epoch := head.epoch;
    RETURN NEXT;
END
$$;
