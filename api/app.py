"""The Litestar application, assembled in one place."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.openapi import OpenAPIConfig

from api.attempt_routes import AttemptController
from api.errors import handle_exception
from api.health import VERSION, health, metrics, ready
from api.manifest_routes import validate_manifest
from api.observability import Metrics, middleware
from api.queue_routes import QueueController
from api.run_routes import RunnerJobController
from api.session_routes import show_session
from ledger.database import DbConnection, create_pool, data_dir
from ledger.streams import RecordedEntry
from ledger.writer import LedgerWriter
from projections.store import project
from runner_assembly import faults
from runner_assembly.dispatch import Dispatcher
from runner_assembly.drivers import make_driver
from runner_assembly.settings import RunnerSettings

MAX_BODY_BYTES = 1024 * 1024


def create_app(database_url: str, *, pool_size: int = 10,
               settings: RunnerSettings | None = None) -> Litestar:
    """The API bound to one database; the pool, ledger writer and dispatcher live with it."""
    runner = settings or RunnerSettings.from_env(data_dir())
    observed = Metrics()

    async def project_and_measure(conn: DbConnection, entries: list[RecordedEntry]) -> None:
        started = time.perf_counter()
        await project(conn, entries)
        observed.projection.observe(time.perf_counter() - started)
        observed.appends.inc(len(entries))

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        # Separate pools: fence waiters and reads can never starve the ledger writer.
        pool = await create_pool(database_url, max_size=pool_size)
        writer_pool = await create_pool(database_url, min_size=1, max_size=3)
        fence_pool = await create_pool(database_url, min_size=1, max_size=pool_size)
        writer = LedgerWriter(writer_pool, project_and_measure)
        await writer.start()
        driver = faults.wrap(make_driver(runner), runner.faults)
        app.state.pool, app.state.writer, app.state.settings = pool, writer, runner
        app.state.metrics = observed
        app.state.dispatcher = Dispatcher(pool, fence_pool, writer, driver, runner)
        try:
            yield
        finally:
            await writer.close()
            for each in (pool, writer_pool, fence_pool):
                await each.close()

    return Litestar(
        route_handlers=[QueueController, AttemptController, RunnerJobController, show_session,
                        validate_manifest, health, ready, metrics],
        middleware=[middleware(observed)],
        lifespan=[lifespan],
        exception_handlers={Exception: handle_exception},
        request_max_body_size=MAX_BODY_BYTES,
        openapi_config=OpenAPIConfig(title="svc", version=VERSION, path="/api/v1/schema"),
        logging_config=None,  # JSON logs are configured by `svc serve`
        debug=False,
    )
