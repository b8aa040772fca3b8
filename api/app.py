"""The Litestar application, assembled in one place."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.openapi import OpenAPIConfig

from api.errors import handle_exception
from api.health import VERSION, health
from api.queue_routes import QueueController
from ledger.database import create_pool
from ledger.writer import LedgerWriter
from projections.store import project

MAX_BODY_BYTES = 1024 * 1024


def create_app(database_url: str, *, pool_size: int = 10) -> Litestar:
    """The API bound to one database; the pool and the ledger writer live with the app."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        pool = await create_pool(database_url, max_size=pool_size)
        writer = LedgerWriter(pool, project)
        await writer.start()
        app.state.pool, app.state.writer = pool, writer
        try:
            yield
        finally:
            await writer.close()
            await pool.close()

    return Litestar(
        route_handlers=[QueueController, health],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=MAX_BODY_BYTES,
        openapi_config=OpenAPIConfig(title="svc", version=VERSION, path="/api/v1/schema"),
        debug=False,
    )
