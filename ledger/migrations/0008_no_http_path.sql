-- A projection holds no HTTP path (issue 12): the API computes a session's path from its id.
-- The stored latestAttempt text keeps its other keys, in their order and encoding, so a
-- rebuilt row (replay) has the same text as the migrated live row.

ALTER TABLE task_summary DROP COLUMN session_path;
UPDATE task_summary
SET latest_attempt = regexp_replace(latest_attempt::text,
                                    ',"sessionPath":"(?:[^"\\]|\\.)*"', '')::json
WHERE latest_attempt::text LIKE '%"sessionPath":%';
