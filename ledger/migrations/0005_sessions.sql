-- The session layer: session list, turns (commands of runs) and per-reader cursors, folded
-- from the session streams; output and trace lines are the session's own append-only store.

CREATE TABLE session_summary (
    session_id          text        PRIMARY KEY,
    conversation_id     text        NOT NULL,
    backend_profile     text        NOT NULL,
    state               text        NOT NULL,
    thread_id           text,
    storage_kind        text        NOT NULL,
    pvc_name            text,
    pvc_phase           text,
    storage_size_bytes  bigint,
    storage_files_count integer,
    storage_sha256      text,
    storage_updated_at  timestamptz,
    ttl_seconds         integer     NOT NULL,
    expires_at          timestamptz NOT NULL,
    run_id              text,
    latest_run_id       text,
    latest_command_id   text,
    latest_runner_job_id text,
    latest_task_id      text,
    turns               integer     NOT NULL,
    failure_kind        text,
    version             integer     NOT NULL,
    change_seq          bigint      NOT NULL,
    creator             text        NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL
);
CREATE UNIQUE INDEX session_summary_change_seq ON session_summary (change_seq);
CREATE INDEX session_summary_state_seq ON session_summary (state, change_seq);
CREATE INDEX session_summary_expiry ON session_summary (expires_at) WHERE storage_kind = 'volume';

CREATE TABLE session_turn (
    runner_job_id   text        PRIMARY KEY,
    session_id      text        NOT NULL,
    run_id          text        NOT NULL,
    command_id      text        NOT NULL,
    task_id         text,
    thread_id       text,
    status          text        NOT NULL,
    result_thread_id text,
    driver          text,
    handle          text,
    failure_kind    text,
    failure_message text,
    exit_code       integer,
    prompt_sha256   text        NOT NULL,
    prompt_bytes    integer     NOT NULL,
    change_seq      bigint      NOT NULL,
    created_at      timestamptz NOT NULL,
    started_at      timestamptz,
    finished_at     timestamptz
);
CREATE INDEX session_turn_session ON session_turn (session_id, created_at);
CREATE UNIQUE INDEX session_turn_command ON session_turn (command_id);

CREATE TABLE session_read_cursor (
    reader_id   text    NOT NULL,
    session_id  text    NOT NULL,
    version     integer NOT NULL,
    change_seq  bigint  NOT NULL,
    PRIMARY KEY (reader_id, session_id)
);

-- Output and trace: append-only per session and channel, ``seq`` from the head row, which
-- an appender locks until commit, so a reader that has seen seq N never later sees a new
-- line at or below N.
CREATE TABLE session_line_head (
    session_id  text    NOT NULL,
    channel     text    NOT NULL,
    last_seq    bigint  NOT NULL,
    PRIMARY KEY (session_id, channel)
);

CREATE TABLE session_line (
    session_id    text        NOT NULL,
    channel       text        NOT NULL,
    seq           bigint      NOT NULL,
    runner_job_id text        NOT NULL,
    line          text        NOT NULL,
    recorded_at   timestamptz NOT NULL,
    PRIMARY KEY (session_id, channel, seq)
);

-- How far each runner job's channel has been taken in (bytes), so nothing is taken twice.
CREATE TABLE session_line_source (
    runner_job_id text   NOT NULL,
    channel       text   NOT NULL,
    byte_offset   bigint NOT NULL,
    PRIMARY KEY (runner_job_id, channel)
);

CREATE TRIGGER session_line_append_only BEFORE UPDATE OR DELETE ON session_line
    FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();

-- The run base of a run the session API created (no task): what its commands execute with.
ALTER TABLE run_record ADD COLUMN base json;
