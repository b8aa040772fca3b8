"""Liveness (``/api/v1/live``: the process answers), health (``/api/v1/health``: and its
database does), readiness (``/api/v1/ready``: and every migration is applied), ``/metrics``."""

from __future__ import annotations

import logging

import asyncpg
from litestar import Response, get

from api import wire
from api.access import OPEN
from api.errors import READ_ERRORS
from api.metrics_export import figure_families
from api.params import MetricsDep, PoolDep, QueueDep
from ledger.errors import LedgerUnavailable
from ledger.migrate import pending_migrations
from ledger.store import OUTAGE_ERRORS
from ledger.version import VERSION
from projections import queries
from projections.metrics_queries import ServiceFigures, service_figures
from runner_assembly.assembly.capability import work_ready_summary


@get("/api/v1/live", tags=["health"], responses=READ_ERRORS, opt=OPEN)
async def check_liveness() -> wire.Live:
    """The process serves requests; the database is not asked (a probe that restarts the
    process must not fail while only the database is down)."""
    return wire.Live(status="live", version=VERSION)


@get("/api/v1/health", tags=["health"], responses=READ_ERRORS, opt=OPEN)
async def check_health(queue_api: QueueDep) -> wire.Health:
    """The service is up and its database answers."""
    # One dependency: Litestar resolves two or more of a handler in a task group per request.
    return wire.Health(status="ok", version=VERSION, database="ok",
                       change_seq=await queue_api.head.read(),
                       work_ready=work_ready_summary(), sandbox=queue_api.settings.sandbox,
                       backend_network=queue_api.settings.backend_network)


@get("/api/v1/ready", tags=["health"], responses=READ_ERRORS, opt=OPEN)
async def check_readiness(pool: PoolDep) -> wire.Health:
    """Ready to serve: the database answers and every migration is applied."""
    try:
        async with pool.acquire() as conn:
            pending = await pending_migrations(conn)
            change_seq = await queries.high_water(conn)
    except (OSError, LedgerUnavailable) as error:
        raise LedgerUnavailable("the database does not answer") from error
    if pending:
        raise LedgerUnavailable("migrations are pending: run `svc db migrate`",
                                pending=[m.name for m in pending])
    return wire.Health(status="ready", version=VERSION, database="ok", change_seq=change_seq,
                       work_ready=work_ready_summary(), migrations="current")


SCRAPE_DB_TIMEOUT_S = 5.0
"""How long a scrape waits for the database's figures (then it answers without them)."""
log = logging.getLogger("svc.metrics")


@get("/metrics", tags=["health"], include_in_schema=False, opt=OPEN)
async def metrics(metrics: MetricsDep, pool: PoolDep) -> Response[bytes]:
    """Prometheus metrics: the counters (of every worker), and the projections' figures read
    now (``svc_database_up`` 0 and none of them when the database does not answer)."""
    figures: ServiceFigures | None = None
    try:
        async with pool.acquire(timeout=SCRAPE_DB_TIMEOUT_S) as conn:
            figures = await service_figures(conn, SCRAPE_DB_TIMEOUT_S)
    except (asyncpg.PostgresError, *OUTAGE_ERRORS) as error:  # a connection cut mid-use too
        log.warning("metrics: the database did not answer (%s)", type(error).__name__)
    return Response(content=metrics.render(figure_families(figures)),
                    media_type="text/plain; version=0.0.4; charset=utf-8")
