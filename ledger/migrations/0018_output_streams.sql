-- Session output lines say which of the backend's streams they came from (issue 27 item 4):
-- `stdout` or `stderr` (lines stored before read as `stdout`), and a line longer than a
-- protocol line (64 KiB) is stored as numbered parts (`part` of `parts`) whose texts,
-- concatenated in order, are the line (item 6). The batches of a job's stderr are numbered
-- in their own session_line_source row (channel `output:stderr`).

ALTER TABLE session_line
    ADD COLUMN stream text NOT NULL DEFAULT 'stdout' CHECK (stream IN ('stdout', 'stderr')),
    ADD COLUMN part integer CHECK (part >= 1),
    ADD COLUMN parts integer CHECK (parts >= 2 AND part <= parts);
