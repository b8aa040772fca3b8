"""``/api/v1/auth/keys``: issue, list, show and revoke API keys (admins only). A new key is in
the answer of its creation and nowhere else."""

from __future__ import annotations

from litestar import Controller, get, post
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from api import auth_wire as aw
from api.access import role
from api.auth_keys import KeySpec
from api.auth_principal import acting_as
from api.body import read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from api.location import Located
from api.openapi import body
from api.params import HttpRequest, KeyId, KeysDep
from ledger.jsonvalue import JSONObject

EXAMPLE: JSONObject = {"tenant": "acme", "roles": ["submitter"], "projects": ["demo"],
           "expiresInSeconds": 2592000}


class AuthKeyController(Controller):
    """API keys: create (shown once), list and show (never the key), revoke."""

    path = "/api/v1/auth/keys"
    tags = ("auth",)

    @post("/", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS,
          after_request=Located("/api/v1/auth/keys/{keyId}"),
          opt=body(aw.KeyCreateBody, EXAMPLE) | role("admin"))
    async def create_key(self, request: HttpRequest, auth_keys: KeysDep) -> aw.KeyCreated:
        """Issue a key; the answer holds the key itself, once."""
        spec = await read_body(request, aw.KeyCreateBody)
        return await auth_keys.issue(KeySpec(
            tenant=spec.tenant, roles=tuple(spec.roles), projects=tuple(spec.projects),
            expires_in_s=spec.expires_in_seconds), acting_as("api"))

    @get("/", responses=READ_ERRORS, opt=role("admin"))
    async def list_keys(self, auth_keys: KeysDep) -> aw.KeyList:
        """Every key: id, prefix, tenant, roles, projects, expiry, revocation."""
        return aw.KeyList(await auth_keys.list())

    @get("/{key_id:str}", responses=READ_ERRORS, opt=role("admin"))
    async def show_key(self, auth_keys: KeysDep, key_id: KeyId) -> aw.KeyView:
        """One key: id, prefix, tenant, roles, projects, expiry, revocation (never the key)."""
        return await auth_keys.show(key_id)

    @post("/{key_id:str}/revoke", status_code=HTTP_200_OK, responses=WRITE_ERRORS,
          opt=role("admin"))
    async def revoke_key(self, auth_keys: KeysDep, key_id: KeyId) -> aw.KeyView:
        """Revoke a key: refused from now on (revoking it again changes nothing)."""
        return await auth_keys.revoke(key_id, acting_as("api"))
