"""``GET /api/v1/health``: liveness plus the database answer and the ledger high-water mark."""

from __future__ import annotations

from litestar import get
from litestar.datastructures import State

from api import wire
from projections import queries

VERSION = "0.1.0"


@get("/api/v1/health", tags=["health"])
async def health(state: State) -> wire.Health:
    """The service is up and its database answers."""
    return wire.Health(status="ok", version=VERSION, database="ok",
                       change_seq=await queries.high_water(state.pool))
