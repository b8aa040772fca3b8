"""Helpers shared by the tests: database URLs, snapshots of ledger and projections, bodies."""

from __future__ import annotations

import asyncio
import itertools
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine

from api.auth_principal import new_key
from ledger.database import create_pool
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from runner_assembly.drivers.protocol import RunnerDriver
from runner_assembly.orchestration.wiring import Orchestration, orchestration
from runner_assembly.settings import RunnerSettings

TASKS = "/api/v1/queue/tasks"
TEST_ADMIN_KEY = new_key()
"""The admin key of this test process: every server the tests build accepts it (its sha256
is ``SVC_ADMIN_KEY_SHA256``, no ledger entry), the CLI sends it (``SVC_TOKEN``), and every
HTTP request to a loopback test server carries it unless the request names a credential of
its own or the test asks for none (:func:`anonymous`; ``tests/conftest.py``)."""
ADMIN_HEADER_LINE = b"Authorization: Bearer " + TEST_ADMIN_KEY.encode() + b"\r\n"
"""The key as a raw HTTP/1.1 header line, for requests written to a socket by hand."""
TEST_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "testserver.local"})
"""Where the tests' servers listen: the hosts their clients send the test admin key to."""
SEND_ADMIN_KEY: ContextVar[bool] = ContextVar("send_admin_key", default=True)
"""Whether a request without a credential gets the test admin key (``tests/conftest.py``)."""


@contextmanager
def anonymous() -> Iterator[None]:
    """Requests made inside carry only the credentials they name themselves."""
    token = SEND_ADMIN_KEY.set(False)
    try:
        yield
    finally:
        SEND_ADMIN_KEY.reset(token)
_counter = itertools.count()

S = TypeVar("S")
C = TypeVar("C")
E = TypeVar("E")


@contextmanager
def server_tmp(prefix: str) -> Iterator[Path]:
    """A private directory for a Postgres data directory, outside pytest's base temp: a
    concurrent pytest session resets ``pytest-of-<user>`` to mode 0700, which would lock the
    embedded server's own user out of a data directory below it."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def with_database(url: str, name: str) -> str:
    """The same server URL pointing at another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def unique_name(prefix: str) -> str:
    """A database name unique within this test run."""
    import os

    return f"{prefix}_{os.getpid()}_{next(_counter)}"


async def fetch_value(url: str, query: str, *args: Any) -> Any:
    """The first column of the first row ``query`` answers, on a connection of its own."""
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def snapshot(url: str) -> dict[str, Any]:
    """Everything a mutation could change: ledger head and size, every projection row."""
    conn = await asyncpg.connect(url)
    try:
        result: dict[str, Any] = {
            "head": tuple(await conn.fetchrow("SELECT last_seq, last_hash FROM ledger_head")),
            "ledger": await conn.fetchval("SELECT count(*) FROM ledger"),
        }
        for table, key in (("task_summary", "task_id"), ("task_contract", "task_id"),
                           ("read_cursor", "reader_id, task_id"),
                           ("queue_stats", "queue, lane, state, backend_profile"),
                           ("commander_view", "task_id"), ("judge_run", "task_id, judge_id"),
                           ("session_summary", "session_id"),
                           ("session_turn", "runner_job_id"),
                           ("session_read_cursor", "reader_id, session_id"),
                           ("session_line", "session_id, channel, seq"),
                           ("api_key", "key_id")):
            rows = await conn.fetch(f"SELECT *  FROM {table} ORDER BY {key}")
            result[table] = [tuple(str(v) for v in r.values()) for r in rows]
        return result
    finally:
        await conn.close()


def task_body(**overrides: Any) -> dict[str, Any]:
    """A valid submit body."""
    body: dict[str, Any] = {
        "tenantId": "acme", "projectId": "demo", "queue": "main", "title": "Fix the build",
        "payload": {"prompt": "make the tests pass"},
    }
    body.update(overrides)
    return body


SECRET_CANARY = "SecretCanaryValue-7f3a9c2e1b8d4f6a0c5e"
"""Planted in every test secret file: it must never appear in any output."""


def write_profile_secret(data_dir: Any, profile: str = "profile-1") -> None:
    """Create the file-store secret of a profile, with canary values."""
    from runner_assembly.assembly.profiles import PROFILE_SECRETS

    secret = PROFILE_SECRETS[profile]
    folder = data_dir / "secrets" / "svc-v01" / secret.name
    folder.mkdir(parents=True, exist_ok=True)
    for key in secret.keys:
        (folder / key).write_text(f'{{"token": "{SECRET_CANARY}"}}\n')


async def replay_report(url: str) -> Any:
    """Replay-verify the database at ``url`` on a connection of its own."""
    from projections.replay import replay

    conn = await asyncpg.connect(url)
    try:
        return await replay(conn)
    finally:
        await conn.close()


SECRET_PROJECTIONS = ("job-secret", ".backend", ".ssh")
"""Job folders that hold projected secret values on purpose (never scanned for leaks)."""


async def stored_outputs(database_url: str, tmp_path: Path) -> tuple[list[str], list[Path]]:
    """Everything a server run left behind that must carry no secret: its logs, the ledger
    payloads, the run and session rows, and the job files outside the secret projections."""
    outputs = [path.read_text() for path in tmp_path.glob("serve-*.log")]
    conn = await asyncpg.connect(database_url)
    try:
        outputs += [r["payload"] for r in await conn.fetch("SELECT payload::text FROM ledger")]
        for table in ("run_record", "session_summary", "session_turn", "session_line"):
            outputs += [r["t"] for r in await conn.fetch(
                f"SELECT row_to_json(r)::text AS t FROM {table} r")]
    finally:
        await conn.close()
    jobs = tmp_path / "data" / "jobs"
    files = [p for p in jobs.rglob("*") if p.is_file()
             and not set(SECRET_PROJECTIONS) & set(p.relative_to(jobs).parts)]
    return outputs + [p.read_text(errors="replace") for p in files], files


async def post_changing_nothing(client: Any, database_url: str, url: str, body: Any,
                                status: int) -> Any:
    """POST ``body`` to ``url``: the response, after checking its ``status`` and that the
    database did not change."""
    before = await snapshot(database_url)
    response = await client.post(url, json=body)
    assert response.status_code == status
    assert await snapshot(database_url) == before
    return response


def decided(decide: Callable[[S | None, C], list[E]], evolve: Callable[[S | None, E], S],
            state: S | None, *commands: C) -> tuple[S, list[E]]:
    """Decide and fold each command in turn: the state after, and the events of the last."""
    events: list[E] = []
    for command in commands:
        events = decide(state, command)
        for event in events:
            state = evolve(state, event)
    assert state is not None
    return state, events


class WriterMachine(RuleBasedStateMachine):
    """A state machine driving the real ledger writer from synchronous rules on a private
    event loop (hypothesis has no async rules); replay must verify at teardown."""

    database_url = ""

    def open_ledger(self, max_size: int) -> None:
        """Start the loop, a pool of ``max_size`` connections, the writer and the model."""
        self.loop = asyncio.new_event_loop()
        self.pool = self.run(create_pool(self.database_url, min_size=1, max_size=max_size))
        self.writer = LedgerWriter(self.pool, plan_projection)
        self.run(self.writer.start())
        self.model: dict[str, dict[str, Any]] = {}

    def run(self, awaitable: Any) -> Any:
        """Run ``awaitable`` to completion on the machine's loop."""
        return self.loop.run_until_complete(awaitable)

    def other_pools(self) -> list[asyncpg.Pool]:
        """Pools besides the writer's, closed at teardown."""
        return []

    def teardown(self) -> None:
        if hasattr(self, "loop"):
            self.run(self.check_replay())
            self.run(self.writer.close())
            for pool in (self.pool, *self.other_pools()):
                self.run(pool.close())
            self.loop.close()

    @classmethod
    def check(cls, database_url: str, examples: int) -> None:
        """Run ``examples`` command sequences of as many steps against ``database_url``."""
        cls.database_url = database_url
        machine_test = cls.TestCase
        machine_test.settings = settings(
            max_examples=examples, stateful_step_count=examples, deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        machine_test().runTest()

    async def check_replay(self) -> None:
        """Replay-verify the machine's database."""
        report = await replay_report(self.database_url)
        assert report.ok, report


async def refresh_until_settled(http: httpx.AsyncClient, task_id: str,
                                within: float = 60) -> dict[str, Any]:
    """Refresh a task over HTTP until it no longer runs (or ``within`` seconds pass)."""
    deadline = time.monotonic() + within
    while True:
        task = (await http.post(f"{TASKS}/{task_id}/refresh")).json()
        if task["state"] != "running" or time.monotonic() > deadline:
            return dict(task)
        await asyncio.sleep(0.1)


@asynccontextmanager
async def orchestration_on(database_url: str, data_dir: Path,
                           driver: RunnerDriver
                           ) -> AsyncIterator[tuple[Orchestration, LedgerWriter]]:
    """The manager's collaborators on the test database with ``driver``, and their ledger
    writer, outside the app (a profile-1 secret under ``data_dir``): for tests that call
    them directly."""
    write_profile_secret(data_dir)
    pool = await create_pool(database_url, min_size=1, max_size=4)
    fence_pool = await create_pool(database_url, min_size=1, max_size=4)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        yield orchestration(pool, fence_pool, writer, driver,
                            RunnerSettings(data_dir=data_dir)), writer
    finally:
        await writer.close()
        await pool.close()
        await fence_pool.close()


def with_script_backend(settings: Any, script: str, profile: str = "profile-1") -> Any:
    """``settings`` (RunnerSettings) with ``profile`` run by the ``command`` kind: this
    Python interpreter running ``script``."""
    import dataclasses
    import sys

    return dataclasses.replace(
        settings, backend_kinds={**settings.backend_kinds, profile: "command"},
        backend_commands={**settings.backend_commands, profile: (sys.executable, "-c", script)})
