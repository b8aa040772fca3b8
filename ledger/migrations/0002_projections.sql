-- Read-side tables, written in the same transaction as the ledger append.

CREATE TABLE task_summary (
    task_id         text        PRIMARY KEY,
    tenant_id       text        NOT NULL,
    project_id      text        NOT NULL,
    queue           text        NOT NULL,
    lane            text        NOT NULL,
    title           text        NOT NULL,
    priority        integer     NOT NULL,
    state           text        NOT NULL,
    backend_profile text,
    summary         text        NOT NULL,
    version         integer     NOT NULL,
    change_seq      bigint      NOT NULL,
    payload_hash    text        NOT NULL,
    latest_attempt  json,
    session_path    text,
    creator         text        NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE UNIQUE INDEX task_summary_change_seq ON task_summary (change_seq);
CREATE INDEX task_summary_queue_seq ON task_summary (queue, change_seq);
CREATE INDEX task_summary_queue_lane_seq ON task_summary (queue, lane, change_seq);
CREATE INDEX task_summary_state_seq ON task_summary (state, change_seq);
CREATE INDEX task_summary_queue_state_seq ON task_summary (queue, state, change_seq);

-- The submitted contract, written once: kept out of the hot summary row.
CREATE TABLE task_contract (
    task_id  text PRIMARY KEY,
    contract json NOT NULL
);

CREATE TABLE read_cursor (
    reader_id  text    NOT NULL,
    task_id    text    NOT NULL,
    version    integer NOT NULL,
    change_seq bigint  NOT NULL,
    PRIMARY KEY (reader_id, task_id)
);

CREATE TABLE queue_stats (
    queue           text   NOT NULL,
    lane            text   NOT NULL,
    state           text   NOT NULL,
    backend_profile text   NOT NULL,
    task_count      bigint NOT NULL,
    PRIMARY KEY (queue, lane, state, backend_profile)
);

CREATE TABLE commander_view (
    task_id           text    PRIMARY KEY,
    queue             text    NOT NULL,
    attention         integer NOT NULL,
    change_seq        bigint  NOT NULL,
    phase             text    NOT NULL,
    recovery          text    NOT NULL
);
CREATE INDEX commander_view_rank ON commander_view (attention, change_seq DESC);
CREATE INDEX commander_view_queue_rank ON commander_view (queue, attention, change_seq DESC);
