-- Read queries of the api_key projection (DESIGN 12).

-- name: key_by_sha256
SELECT key_id, key_sha256, prefix, tenant, roles::text AS roles, projects::text AS projects,
       expires_at, revoked_at, created_at, change_seq
FROM api_key
WHERE key_sha256 = $1

-- name: key_by_id
SELECT key_id, key_sha256, prefix, tenant, roles::text AS roles, projects::text AS projects,
       expires_at, revoked_at, created_at, change_seq
FROM api_key
WHERE key_id = $1

-- name: list_keys
SELECT key_id, key_sha256, prefix, tenant, roles::text AS roles, projects::text AS projects,
       expires_at, revoked_at, created_at, change_seq
FROM api_key
ORDER BY created_at, key_id

-- name: has_admin_key
SELECT EXISTS (
    SELECT 1 FROM api_key
    WHERE tenant = '*' AND roles::jsonb ? 'admin' AND revoked_at IS NULL
      AND (expires_at IS NULL OR expires_at > now()))
