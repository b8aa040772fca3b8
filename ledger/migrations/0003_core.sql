-- Attempt history and the core layer's records: run, command, runner job.

CREATE TABLE attempt_summary (
    attempt_id          text        PRIMARY KEY,
    task_id             text        NOT NULL,
    retry_index         integer     NOT NULL,
    state               text        NOT NULL,
    idempotency_key     text,
    reason              text,
    previous_attempt_id text,
    run_id              text        NOT NULL,
    command_id          text        NOT NULL,
    runner_job_id       text        NOT NULL,
    session_id          text        NOT NULL,
    backend_profile     text        NOT NULL,
    failure_kind        text,
    failure_message     text,
    exit_code           integer,
    change_seq          bigint      NOT NULL,
    created_at          timestamptz NOT NULL,
    started_at          timestamptz,
    finished_at         timestamptz,
    updated_at          timestamptz NOT NULL,
    CONSTRAINT attempt_summary_task_retry UNIQUE (task_id, retry_index)
);

CREATE TABLE run_record (
    run_id              text        PRIMARY KEY,
    task_id             text        NOT NULL,
    attempt_id          text        NOT NULL,
    command_id          text        NOT NULL,
    runner_job_id       text        NOT NULL,
    session_id          text        NOT NULL,
    conversation_id     text        NOT NULL,
    backend_profile     text        NOT NULL,
    status              text        NOT NULL,
    exit_code           integer,
    failure_kind        text,
    failure_message     text,
    driver              text,
    handle              text,
    resource_bundle_ref json,
    prompt_sha256       text        NOT NULL,
    prompt_bytes        integer     NOT NULL,
    created_at          timestamptz NOT NULL,
    started_at          timestamptz,
    finished_at         timestamptz,
    change_seq          bigint      NOT NULL
);
CREATE INDEX run_record_session ON run_record (session_id, change_seq);

CREATE TABLE command_record (
    command_id  text        PRIMARY KEY,
    run_id      text        NOT NULL,
    status      text        NOT NULL,
    created_at  timestamptz NOT NULL,
    finished_at timestamptz,
    change_seq  bigint      NOT NULL
);

CREATE TABLE runner_job_record (
    runner_job_id text        PRIMARY KEY,
    run_id        text        NOT NULL,
    driver        text,
    handle        text,
    status        text        NOT NULL,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    finished_at   timestamptz,
    change_seq    bigint      NOT NULL
);

-- Runner retention (SVC_RUNNER_RETENTION=1): job creation per namespace is fenced by an
-- advisory lock and a compare-and-swap on this row.
CREATE TABLE runner_capacity (
    namespace   text    PRIMARY KEY,
    max_jobs    integer NOT NULL CHECK (max_jobs >= 0),
    active_jobs integer NOT NULL CHECK (active_jobs >= 0)
);
