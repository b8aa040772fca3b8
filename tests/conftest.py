"""Fixtures: one Postgres per test run (embedded, or SVC_DATABASE_URL's server), a migrated
template database, and a fresh database cloned from it for each test."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
import uvicorn
from litestar import Litestar

from api.app import create_app
from api.auth_principal import key_sha256
from api.settings import ServiceSettings
from ledger.database import APP_LOGIN, ensure_app_login, start_embedded, with_user
from ledger.migrate import migrate
from runner_assembly.settings import RunnerSettings
from tests.support import (
    SEND_ADMIN_KEY,
    TEST_ADMIN_KEY,
    TEST_HOSTS,
    server_tmp,
    unique_name,
    with_database,
    write_profile_secret,
)

logging.getLogger("httpx").setLevel(logging.WARNING)
TEMPLATE = f"svc_template_{os.getpid()}"
SERVER_PIDS: dict[str, int] = {}
"""Process id of each running ``svc serve`` started by the tests, by base URL."""

PG_VERSION_SENSITIVE = frozenset({
    "test_ledger", "test_integrity", "test_projection_registry", "test_no_http_path",
    "test_replay_property", "test_attempt_property", "test_optimistic_commit",
    "test_writer_batching", "test_writer_groups", "test_read_cache", "test_polling",
    "test_recovery", "test_turn_reservation", "test_api_queue", "test_task_records",
    "test_judge_runs", "test_dispatch", "test_runner_protocol", "test_sessions", "test_grouped",
    "test_codex_backend",  # not Postgres' own: issue 27 asks a real agent on each version
})
"""Modules whose subject is Postgres' own behaviour (SQL, migrations, ledger, projections,
replay, roles and grants, locks and concurrent commits: the capacity compare-and-swap of
dispatch, the runner's claim, the session line store's head lock, the runners' grouped
reports): marked ``pg_versions``, which
``make test`` runs on PostgreSQL 15 as well; every other test runs once, on the embedded 18."""

SERIAL = frozenset({"test_connections"})
"""Modules that time a server under hundreds of connections: marked ``serial``, which
``make test`` runs alone after the others (which run on two processes)."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of the modules above (before ``-m`` selects)."""
    for item in items:
        if item.path.stem in PG_VERSION_SENSITIVE:
            item.add_marker(pytest.mark.pg_versions)
        if item.path.stem in SERIAL:
            item.add_marker(pytest.mark.serial)


FETCH_ROOTS = "SVC_FETCH_ALLOW_FILE_ROOTS"
ADMIN_ENV = {"SVC_ADMIN_KEY_SHA256": key_sha256(TEST_ADMIN_KEY), "SVC_TOKEN": TEST_ADMIN_KEY}


def _with_admin_key(request: httpx.Request) -> None:
    if (SEND_ADMIN_KEY.get() and "authorization" not in request.headers
            and request.url.host in TEST_HOSTS):
        request.headers["Authorization"] = f"Bearer {TEST_ADMIN_KEY}"


@pytest.fixture(scope="session", autouse=True)
def admin_key_everywhere() -> Iterator[str]:
    """Give the tests' servers, CLI runs and HTTP clients the test admin key
    (``tests.support.TEST_ADMIN_KEY``)."""
    before = {name: os.environ.get(name) for name in ADMIN_ENV}
    os.environ.update(ADMIN_ENV)
    sync_send, async_send = httpx.Client.send, httpx.AsyncClient.send

    def send(self: httpx.Client, request: httpx.Request, **options: Any) -> httpx.Response:
        _with_admin_key(request)
        return sync_send(self, request, **options)

    async def send_async(self: httpx.AsyncClient, request: httpx.Request,
                         **options: Any) -> httpx.Response:
        _with_admin_key(request)
        return await async_send(self, request, **options)

    httpx.Client.send = send  # type: ignore[method-assign]
    httpx.AsyncClient.send = send_async  # type: ignore[method-assign]
    yield TEST_ADMIN_KEY
    httpx.Client.send, httpx.AsyncClient.send = sync_send, async_send  # type: ignore[method-assign]
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session", autouse=True)
def fetch_allow_file_roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tests' own repositories are ``file://`` URLs in pytest's temporary directories:
    the operator allow-list (DESIGN 13) names that root for every server the tests build
    (``ServiceSettings.from_env`` and :func:`running_api`). Data directories below it stay
    refused (the settings deny them)."""
    root = str(tmp_path_factory.getbasetemp().resolve())
    before = os.environ.get(FETCH_ROOTS)
    os.environ[FETCH_ROOTS] = root
    yield root
    if before is None:
        os.environ.pop(FETCH_ROOTS, None)
    else:
        os.environ[FETCH_ROOTS] = before


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """Admin URL of the Postgres server the tests use."""
    external = os.environ.get("SVC_DATABASE_URL")
    if external:
        yield external
        return
    with server_tmp("svc-test-pg-") as directory:
        server = start_embedded(directory / "data")
        yield server.get_uri("postgres")
        server.cleanup()


async def _admin(server_url: str, sql: str) -> None:
    conn = await asyncpg.connect(with_database(server_url, "postgres"))
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
async def template_url(server_url: str) -> AsyncIterator[str]:
    """A migrated database that every test database is cloned from."""
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{TEMPLATE}"')
    await _admin(server_url, f'CREATE DATABASE "{TEMPLATE}"')
    url = with_database(server_url, TEMPLATE)
    conn = await asyncpg.connect(url)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    await ensure_app_login(with_database(server_url, "postgres"))
    yield url
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')


@pytest.fixture
async def database_url(server_url: str, template_url: str) -> AsyncIterator[str]:
    """A fresh, migrated database for one test."""
    name = unique_name("svc_test")
    await _admin(server_url, f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    yield with_database(server_url, name)
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def app_url(database_url: str) -> str:
    """The test database as the service's own role (``svc_api``: no owner rights)."""
    return with_user(database_url, APP_LOGIN)


@pytest.fixture
def runner_settings(tmp_path: Path) -> RunnerSettings:
    """Runner settings with a private data dir holding a profile-1 secret."""
    data = tmp_path / "svc-data"
    write_profile_secret(data)
    return ServiceSettings.from_env().runner(data)


@pytest.fixture
async def client(app_url: str,
                 runner_settings: RunnerSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The real Litestar app on the test database (as the service's role), served over HTTP
    on a loopback port in the tests' event loop: its runners report there too."""
    async with app_client(app_url, runner_settings) as http:
        yield http


class _InProcessServer(uvicorn.Server):
    """A uvicorn server inside the tests' event loop: the signals stay pytest's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def listening(app: Litestar, port: int) -> AsyncIterator[None]:
    """Serve ``app`` (its lifespan included) over HTTP on ``port`` in this event loop."""
    server = _InProcessServer(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on",
                                             log_level="warning", access_log=False,
                                             log_config=None))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the test server stopped before it started")
        await asyncio.sleep(0.01)
    try:
        yield
    finally:
        server.should_exit = True
        await task


@asynccontextmanager
async def app_client(database_url: str,
                     settings: RunnerSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The app with these settings served on a loopback port (its runners report there),
    and a client of it."""
    port = free_port()
    app = create_app(database_url, settings=dataclasses.replace(
        settings, runner_api_url=f"http://127.0.0.1:{port}"))
    async with listening(app, port), httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        yield http


def free_port() -> int:
    """A TCP port free on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def svc_executable() -> str:
    """The installed ``svc`` console script next to this interpreter."""
    return str(Path(sys.executable).with_name("svc"))


@asynccontextmanager
async def running_api(database_url: str, workdir: Path,
                      extra_env: dict[str, str] | None = None,
                      port: int | None = None) -> AsyncIterator[str]:
    """Run a real ``svc serve`` process on ``database_url``; yields its base URL.

    Its data dir is ``workdir/data`` (with a profile-1 secret), shared by restarts; a restart
    on the same ``port`` is reached by the runners the previous process started.
    """
    port = port or free_port()
    write_profile_secret(workdir / "data")
    env = {"PATH": os.environ.get("PATH", ""),
           "SVC_DATABASE_URL": with_user(database_url, APP_LOGIN),
           "SVC_MIGRATE_DATABASE_URL": database_url, "SVC_PORT": str(port),
           "SVC_DATA_DIR": str(workdir / "data"), "SVC_SHUTDOWN_GRACE_S": "3",
           "SVC_WORKERS": "1", FETCH_ROOTS: os.environ.get(FETCH_ROOTS, ""),
           **ADMIN_ENV, **(extra_env or {})}
    log_path = workdir / f"serve-{port}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen([svc_executable(), "serve"], env=env, stdout=log,
                                   stderr=log)
        base = f"http://127.0.0.1:{port}"
        SERVER_PIDS[base] = process.pid
        try:
            deadline = time.monotonic() + 30
            async with httpx.AsyncClient() as http:
                while True:
                    try:
                        if (await http.get(f"{base}/api/v1/health")).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(log_path.read_text())
                    await asyncio.sleep(0.1)
            yield base
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(10)


@pytest.fixture
async def served_api(database_url: str, tmp_path: Path) -> AsyncIterator[str]:
    """A real ``svc serve`` process on the test database; yields its base URL."""
    async with running_api(database_url, tmp_path) as base:
        yield base
