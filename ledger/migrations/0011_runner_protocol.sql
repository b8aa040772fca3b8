-- The runner protocol (DESIGN 9): a runner sends its output and trace lines in batches
-- numbered by seq; a channel's source remembers the last batch it accepted, so a resent
-- batch is accepted once. (byte_offset stays for jobs that were read from files.)

ALTER TABLE session_line_source ADD COLUMN batch_seq bigint NOT NULL DEFAULT 0;
