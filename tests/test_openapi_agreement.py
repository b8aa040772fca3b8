"""Where the schema and the code must agree on a value JSON Schema allows: an integer
written with a zero fraction (``61.0``) is an integer, optional fields included."""

from __future__ import annotations

import httpx
import msgspec
import pytest

from api.body import convert


class Limits(msgspec.Struct):
    count: int = 0
    expires: int | None = None
    seqs: list[int | None] = msgspec.field(default_factory=list)


@pytest.mark.parametrize(("sent", "taken"), [
    ({"count": 3.0}, Limits(count=3)),
    ({"expires": 61.0}, Limits(expires=61)),
    ({"seqs": [1.0, None, 2e1]}, Limits(seqs=[1, None, 20])),
])
def test_an_integral_float_is_an_integer_optional_or_not(sent: object, taken: Limits) -> None:
    assert convert(sent, Limits) == taken


async def test_a_key_expiring_in_61_0_seconds_is_created(client: httpx.AsyncClient) -> None:
    created = await client.post("/api/v1/auth/keys", json={
        "tenant": "ko", "expiresInSeconds": 61.0, "roles": ["operator"]})
    assert created.status_code == 201, created.text
    refused = await client.post("/api/v1/auth/keys", json={
        "tenant": "ko", "expiresInSeconds": 61.5, "roles": ["operator"]})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid-request"
