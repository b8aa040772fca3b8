"""The Litestar application, assembled in one place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import asyncpg
from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware import DefineMiddleware

from api.allow import allow_middleware
from api.attempt_routes import AttemptController
from api.auth import AuthenticationMiddleware, undeclared_routes
from api.auth_actor import ActingWriter
from api.auth_keys import KeyService
from api.auth_routes import AuthKeyController
from api.auth_sources import CredentialSources, configured_sources
from api.docs_ui import openapi_config
from api.errors import handle_exception
from api.health import check_health, check_liveness, check_readiness, metrics
from api.manifest_routes import validate_manifest
from api.observability import Metrics, middleware
from api.params import Caller
from api.queue_routes import QueueController
from api.run_routes import RunnerJobController
from api.runner_reports import bypass_problems, report_middleware
from api.runner_routes import RunnerController
from api.runner_service import RunnerApi
from api.scoping import provide_caller
from api.server import settle_heap
from api.services import QueueApi, SessionApi
from api.session_routes import RunCommandController, SessionController
from api.settings import ServiceSettings
from ledger.database import DbConnection, create_pool
from ledger.leadership import Leadership
from ledger.relay import RelayAddress, RelayedWriter
from ledger.streams import RecordedEntry
from ledger.together import Statement
from ledger.writer import LedgerWriter, Writer
from projections.store import plan_projection
from runner_assembly.drivers import faults, make_driver
from runner_assembly.orchestration.session_service import SessionService
from runner_assembly.orchestration.wiring import Orchestration, orchestration
from runner_assembly.settings import RunnerSettings

MAX_BODY_BYTES = 1024 * 1024
log = logging.getLogger("svc.sessions")
T = TypeVar("T")


def _started(service: T | None) -> T:
    """A service the app makes at start-up (an error before that)."""
    assert service is not None, "the app has not started"
    return service


async def session_loop(sessions: SessionService, settings: RunnerSettings,
                       leader: Leadership | None = None) -> None:
    """Follow running sessions every ``SVC_SESSION_SYNC_INTERVAL_MS``; remove expired
    session volumes every ``SVC_SESSION_GC_INTERVAL_MS``. Safe in many processes at once;
    with ``leader``, only the process that leads does it (another takes over when it dies)."""
    sync_s = settings.session_sync_interval_ms / 1000
    gc_s = settings.session_gc_interval_ms / 1000
    next_gc = time.monotonic() + gc_s
    while True:
        await asyncio.sleep(sync_s)
        try:
            if leader is not None and not await leader.leads():
                continue
            await sessions.sync_running()
            if time.monotonic() >= next_gc:
                next_gc = time.monotonic() + gc_s
                evicted = await sessions.gc()
                if evicted:
                    log.info("session GC evicted %d expired session volumes", len(evicted))
        except Exception:  # the loop must outlive a database hiccup
            log.exception("session loop iteration failed")


class Services:
    """The typed services handlers receive; built when the app starts (pools need a loop)."""

    def __init__(self, metrics: Metrics, settings: RunnerSettings) -> None:
        self.metrics = metrics
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._queue: QueueApi | None = None
        self._sessions: SessionApi | None = None
        self._runner: RunnerApi | None = None
        self._keys: KeyService | None = None
        self._sources: CredentialSources | None = None

    def start(self, pool: asyncpg.Pool, settings: RunnerSettings,
              services: Orchestration, keys: KeyService,
              sources: CredentialSources) -> SessionService:
        """Build the API services on started pools; the session service, for the loop."""
        self._pool = pool
        self._keys = keys
        self._sources = sources
        self._queue = QueueApi(pool, settings, services.queue, services.dispatcher,
                               services.refresher, self.metrics)
        self._sessions = SessionApi(pool, settings, services.sessions, services.commands)
        self._runner = RunnerApi(services.protocol, services.sessions, settings.runner_lease_s)
        return services.sessions

    def pool(self) -> asyncpg.Pool:
        """The read pool."""
        return _started(self._pool)

    def queue_api(self, caller: Caller) -> QueueApi:
        """Tasks, attempts and runner jobs. (``caller``: see :meth:`provide`.)"""
        return _started(self._queue)

    def session_api(self, caller: Caller) -> SessionApi:
        """Sessions and run commands. (``caller``: see :meth:`provide`.)"""
        return _started(self._sessions)

    def runner_api(self) -> RunnerApi:
        """The runner protocol (its routes take no caller: a runner token has no scope)."""
        return _started(self._runner)

    def key_service(self) -> KeyService:
        """API keys: authentication, issue, revocation."""
        return _started(self._keys)

    def credential_sources(self) -> CredentialSources:
        """Where a request's credential is checked: API keys, and OIDC or ServiceAccount
        tokens when configured."""
        return _started(self._sources)

    def observed(self) -> Metrics:
        """The app's metrics."""
        return self.metrics

    def runner_settings(self) -> RunnerSettings:
        """The runner configuration the app was built with."""
        return self.settings

    def provide(self) -> dict[str, Provide]:
        """The app's dependencies, by parameter name. The queue and session services take
        the caller's scope, unused: Litestar resolves the dependencies of one level together
        in an anyio task group (about 75 µs a request for two plain calls); so each level of
        their routes holds one."""
        return {"pool": Provide(self.pool, sync_to_thread=False),
                "queue_api": Provide(self.queue_api, sync_to_thread=False),
                "session_api": Provide(self.session_api, sync_to_thread=False),
                "runner_api": Provide(self.runner_api, sync_to_thread=False),
                "auth_keys": Provide(self.key_service, sync_to_thread=False),
                "metrics": Provide(self.observed, sync_to_thread=False),
                "settings": Provide(self.runner_settings, sync_to_thread=False),
                "caller": Provide(provide_caller, sync_to_thread=False)}


def create_app(database_url: str, *, pool_size: int = 10,
               settings: RunnerSettings | None = None,
               service: ServiceSettings | None = None,
               metrics_dir: Path | None = None, long_lived: bool = False,
               direct_reports: bool = True) -> Litestar:
    """The API bound to one database; the pool, ledger writer and dispatcher live with it.
    ``service``: the server's settings (default: read from the environment, as ``svc serve``
    reads them); ``settings``: the runner's (default: built from ``service``);
    ``metrics_dir``: where the workers of ``svc serve --workers N`` share their counters;
    ``long_lived``: the app is its process's one app until it exits (``svc serve``): once
    started, its heap is settled (:func:`api.server.settle_heap`); ``direct_reports``: a
    runner's lines and heartbeats are taken beside Litestar's handler layers
    (:mod:`api.runner_reports`; False only to compare the two paths)."""
    service = service or ServiceSettings.from_env()
    runner = settings or service.runner()
    statement_cache = not service.pgbouncer
    relay = RelayAddress.decode(service.ledger_relay)
    observed = Metrics(metrics_dir, api_worker=not service.runner_listener)
    services = Services(observed, runner)

    async def project_and_measure(conn: DbConnection, entries: list[RecordedEntry], *,
                                  numbered_by_postgres: bool = False) -> list[Statement] | None:
        started = time.perf_counter()
        statements = await plan_projection(conn, entries,
                                           numbered_by_postgres=numbered_by_postgres)
        observed.projected(time.perf_counter() - started)
        return statements

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        # Separate pools: fence waiters and reads can never starve the ledger writer.
        # Reads and short transactions leave no session state (advisory locks are taken on
        # the fence pool only): no reset round trip when a read connection is released.
        pool = await create_pool(database_url, max_size=pool_size, transactions_only=True,
                                 statement_cache=statement_cache)
        writer_pool = await _writer_pool(database_url, statement_cache)
        fence_pool = await create_pool(database_url, min_size=1, max_size=pool_size,
                                       statement_cache=statement_cache)
        def count(entries: list[RecordedEntry]) -> None:
            observed.appended(len(entries))

        own = LedgerWriter(writer_pool, project_and_measure, on_commit=count)
        writer: Writer = own if relay is None else RelayedWriter(own, relay, on_commit=count)
        await writer.start()
        acting = ActingWriter(writer)  # a request's entries name its principal
        driver = faults.wrap(make_driver(runner), runner.faults, service.fault_seed)
        keys = KeyService(pool, acting, service.admin_key_sha256)
        sessions = services.start(
            pool, runner, orchestration(pool, fence_pool, acting, driver, runner), keys,
            configured_sources(service, keys))
        # One worker follows the sessions (none behind PgBouncer's transaction mode, which
        # cannot hold a session's lock: there every worker follows them, as before).
        leader = None if service.pgbouncer else Leadership.on(database_url, "session-loop")
        background = [asyncio.create_task(session_loop(sessions, runner, leader),
                                          name="session-loop")]
        if observed.shared is not None:
            background.append(asyncio.create_task(observed.count_periodically(),
                                                  name="metrics-count"))
        try:
            yield
        finally:
            for task in background:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if leader is not None:
                await leader.close()
            await writer.close()
            for each in (pool, writer_pool, fence_pool):
                await each.close()

    app = Litestar(
        route_handlers=[QueueController, AttemptController, RunnerJobController, RunnerController,
                        SessionController, RunCommandController, AuthKeyController,
                        validate_manifest, check_liveness, check_health, check_readiness,
                        metrics],
        dependencies=services.provide(),
        middleware=[middleware(observed),
                    *([report_middleware(services.runner_api)] if direct_reports else []),
                    allow_middleware, DefineMiddleware(AuthenticationMiddleware,
                                                       sources=services.credential_sources)],
        lifespan=[lifespan],
        on_startup=[settle_heap] if long_lived else [],
        state=State({"deploy_endpoint": service.deploy_endpoint,
                     "gate_policy": runner.fetch_allow}),
        exception_handlers={Exception: handle_exception},
        request_max_body_size=MAX_BODY_BYTES,
        openapi_config=openapi_config(),
        logging_config=None,  # JSON logs are configured by `svc serve`
        debug=False,
    )
    missing = undeclared_routes(app)
    if missing:
        raise ValueError(f"routes that declare no role (api.access): {', '.join(missing)}")
    problems = bypass_problems(app) if direct_reports else []
    if problems:
        raise ValueError(f"runner reports cannot be taken directly: {'; '.join(problems)}")
    return app


@asynccontextmanager
async def relay_writer(database_url: str, statement_cache: bool = True
                       ) -> AsyncIterator[LedgerWriter]:
    """The writer the ledger relay of ``svc serve --workers N`` serves every worker with
    (:class:`ledger.relay.RelayHost`), on a pool of its own."""
    pool = await _writer_pool(database_url, statement_cache)
    try:
        yield LedgerWriter(pool, plan_projection)
    finally:
        await pool.close()


async def _writer_pool(database_url: str, statement_cache: bool) -> asyncpg.Pool:
    """A ledger writer's pool: small, transactions only, its fixed statements planned once."""
    return await create_pool(database_url, min_size=1, max_size=3, transactions_only=True,
                             generic_plans=True, statement_cache=statement_cache)
