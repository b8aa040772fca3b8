-- The append-only ledger, its head row (changeSeq counter + hash-chain tip) and the guard trigger.

CREATE TABLE ledger (
    change_seq     bigint      PRIMARY KEY,
    stream_type    text        NOT NULL,
    stream_id      text        NOT NULL,
    stream_version integer     NOT NULL CHECK (stream_version >= 1),
    event_type     text        NOT NULL,
    payload        json        NOT NULL,
    actor          text        NOT NULL,
    recorded_at    timestamptz NOT NULL,
    prev_hash      bytea       NOT NULL,
    hash           bytea       NOT NULL,
    CONSTRAINT ledger_stream_version_unique UNIQUE (stream_id, stream_version)
);

-- One row. Writers lock it for the whole append transaction: this orders commits by
-- change_seq, keeps the sequence gap-free and makes the hash chain linear.
CREATE TABLE ledger_head (
    id        smallint PRIMARY KEY CHECK (id = 1),
    last_seq  bigint   NOT NULL,
    last_hash bytea    NOT NULL
);
INSERT INTO ledger_head (id, last_seq, last_hash) VALUES (1, 0, '\x0000000000000000000000000000000000000000000000000000000000000000');

CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'ledger is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;

CREATE TRIGGER ledger_no_update_delete
    BEFORE UPDATE OR DELETE ON ledger
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

CREATE TRIGGER ledger_no_truncate
    BEFORE TRUNCATE ON ledger
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
