-- API keys (DESIGN 12), folded from the api-key streams: a request's key is found by its
-- sha256 (the key itself is never stored). The service's role gets the rights of every
-- projection table (0006's default privileges).

CREATE TABLE api_key (
    key_id      text        PRIMARY KEY,
    key_sha256  text        NOT NULL,
    prefix      text        NOT NULL,
    tenant      text        NOT NULL,
    roles       json        NOT NULL,
    projects    json        NOT NULL,
    expires_at  timestamptz,
    revoked_at  timestamptz,
    created_at  timestamptz NOT NULL,
    change_seq  bigint      NOT NULL
);
CREATE UNIQUE INDEX api_key_sha256 ON api_key (key_sha256);
