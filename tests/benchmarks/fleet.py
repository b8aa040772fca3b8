"""The ``fleet`` part of ``make bench`` (issue 29 item 2): what a fleet of live agents costs
one manager. N runner jobs are alive at once (``SVC_RUNNER_HEARTBEAT_S=1``, so 200 stand for
2,000 at the default 10 s), while 16 clients list and 16 submit.

Figures, each next to the baseline it is divided by:

- ``fleet_list50_p99_ratio``: p99 of a 50-task page under the fleet (every job printing a
  line a second) ÷ the same load with no job alive. The fleet's figure is the median of
  three readings; the one without it, the median of six: three just before the fleet starts
  and three just after it has ended, so that the machine's drift over the minute between
  (its speed moves by up to a factor of two, ``docs/performance.md``) falls on both sides.
- ``ledger_entries_per_job_hour``: the entries one job's whole life appends (submit to end)
  plus what it appends per hour while it runs (heartbeats and lines append none).
- ``server_cpu_ms_per_heartbeat``: the server's CPU while N jobs only beat (their backends
  sleep) ÷ the heartbeats it took in (the lease rows' renewal counts);
  ``postgres_cpu_ms_per_heartbeat``: Postgres's CPU in the same window ÷ the same beats.
- ``output_lines_per_s_1`` / ``_50``: lines taken in per second from one backend printing as
  fast as it can, and from 50 at once, against ``COPY`` of as many rows into the same line
  table (the raw limit; ratios printed).
- ``server_cpu_ms_per_line_batch``: the server's CPU while N backends print a line a second
  (nothing else asked of it), less their heartbeats at ``server_cpu_ms_per_heartbeat``, ÷ the
  line batches it took in. A runner whose batch was taken within its heartbeat interval
  leaves that beat out (the batch renewed the lease), so few beats remain here.
- ``postgres_cpu_ms_per_report``, ``manager_cpu_ms_per_report``: in the same window,
  Postgres's CPU (its postmaster and children), and the server's and Postgres's together,
  ÷ the reports (line batches and beats) taken in; ``agents_per_core_at_1_report_per_s``:
  how many agents reporting once a second (a line a second, or a beat at
  ``SVC_RUNNER_HEARTBEAT_S=1``) one core of manager and Postgres carries at that cost. The
  runners' own CPU is not the manager's (on Kubernetes they run on other nodes).
- ``line_visible_ms_p50/p99``: from the moment a backend printed a line (it prints the time)
  to the moment a client polling the session API read it, in a window after the list's
  (the fleet still printing, no list or submit load).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import asyncpg
import httpx

from tests.benchmarks import tools

STAMP_PROFILE = "profile-2"
STAMPER = ("import time\n"
           "while True:\n"
           "    print(f'stamp {time.time():.6f}', flush=True)\n"
           "    time.sleep(1)\n")
"""The backend of the line fleet: prints the time it prints, once a second."""
FAST_LINES = 100_000
"""Lines of the one backend printing as fast as it can; each of the 50 prints a tenth."""
VISIBLE_SESSIONS = 10
"""Sessions of the line fleet a client follows to time line visibility."""
WRK_TIMEOUT_S = 10
"""A list or submit slower than this is an error: well above the 2 s of the other parts, so
that a fleet that slows the server down is measured (a ratio) rather than a failed run."""


class Harness(Protocol):
    """What the fleet needs of ``run.Bench``."""

    quick: bool
    seconds: int
    server_group: int
    pgdata: Path

    def report(self, name: str, value: float | int | str) -> None: ...

    def database(self, name: str) -> str: ...

    def api(self, url: str, *serve_args: str,
            env: dict[str, str] | None = None) -> contextlib.AbstractContextManager[str]: ...


def server_env() -> dict[str, str]:
    """The server settings of a fleet run: 1 s heartbeats, the stamping backend as profile 2."""
    return {"SVC_RUNNER_HEARTBEAT_S": "1",
            "SVC_BACKEND_COMMAND_PROFILE_2": shlex.join(["/usr/bin/python3", "-u", "-c",
                                                          STAMPER])}


def figures(bench: Harness) -> None:
    """Measure and report every fleet figure."""
    size = 50 if bench.quick else 200
    url = bench.database("bench_fleet")
    with bench.api(url, env=server_env()) as base:
        client = Fleet(base, url)
        beat_ms = _heartbeat_figures(bench, client, size)
        _line_fleet_figures(bench, client, size, beat_ms)
        _ingest_figures(bench, client)


class Window(NamedTuple):
    """One measured window: its length, the CPU seconds of the server (``svc serve`` and
    its workers) and of Postgres in it, and how far two counters moved."""

    seconds: float
    server_cpu: float
    postgres_cpu: float
    moved: tuple[int, int]


def _measured_window(bench: Harness, counters: Callable[[], tuple[int, int]]) -> Window:
    """Wait one window (at least 10 s) and say what it cost."""
    window = max(bench.seconds, 10)
    before = counters()
    server0 = tools.group_cpu_seconds(bench.server_group)
    postgres0 = tools.postgres_cpu_seconds(bench.pgdata)
    time.sleep(window)
    server = tools.group_cpu_seconds(bench.server_group) - server0
    postgres = tools.postgres_cpu_seconds(bench.pgdata) - postgres0
    after = counters()
    return Window(window, server, postgres, (after[0] - before[0], after[1] - before[1]))


def _heartbeat_figures(bench: Harness, client: Fleet, size: int) -> float:
    """Jobs that only sleep: the server's CPU per heartbeat (returned, in ms), the ledger's
    steady growth."""
    tasks = client.start_jobs(size, {"prompt": "sleep: 3600"})
    window, cpu, postgres, (beats, steady) = _measured_window(
        bench, lambda: (client.heartbeats(), client.ledger_head()))
    client.end(tasks)
    lifecycle = client.entries_of(tasks) / size
    per_hour = steady / size / window * 3600
    bench.report("fleet_jobs", size)
    bench.report("fleet_heartbeats_per_s", beats / window)
    bench.report("server_cpu_ms_per_heartbeat", cpu * 1000 / max(beats, 1))
    bench.report("postgres_cpu_ms_per_heartbeat", postgres * 1000 / max(beats, 1))
    bench.report("ledger_entries_per_job_life", lifecycle)
    bench.report("ledger_entries_per_job_running_hour", per_hour)
    bench.report("ledger_entries_per_job_hour", lifecycle + per_hour)
    return cpu * 1000 / max(beats, 1)


def _line_fleet_figures(bench: Harness, client: Fleet, size: int, beat_ms: float) -> None:
    """Jobs printing a line a second: the server's CPU per line batch (beyond the beats, at
    ``beat_ms`` each), list p99 against the idle one (read before and after), line
    visibility."""
    _settled()  # the beating fleet's teardown is over
    idle = client.list_p99_readings(bench.seconds)
    tasks = client.start_jobs(size, {"prompt": "stamp", "backendProfile": STAMP_PROFILE})
    window, cpu, postgres, (beats, batches) = _measured_window(
        bench, lambda: (client.heartbeats(), client.line_batches()))
    bench.report("fleet_line_batches_per_s", batches / window)
    bench.report("server_cpu_ms_per_line_batch",
                 (cpu * 1000 - beats * beat_ms) / max(batches, 1))
    reports = max(beats + batches, 1)
    manager_ms = (cpu + postgres) * 1000 / reports
    bench.report("postgres_cpu_ms_per_report", postgres * 1000 / reports)
    bench.report("manager_cpu_ms_per_report", manager_ms)
    bench.report("agents_per_core_at_1_report_per_s", 1000 / manager_ms)
    fleet_readings = client.list_p99_readings(bench.seconds)
    fleet_p99 = statistics.median(fleet_readings)
    delays = _line_delays(client, client.sessions_of(tasks[:VISIBLE_SESSIONS]),
                          max(bench.seconds, 10))
    client.end(tasks)
    _settled()
    after = client.list_p99_readings(bench.seconds)
    idle_p99 = statistics.median(idle + after)
    bench.report("fleet_list50_p99_ratio", fleet_p99 / idle_p99)
    bench.report("fleet_list50_p99_ms", fleet_p99 * 1000)
    bench.report("idle_list50_p99_ms", idle_p99 * 1000)
    bench.report("idle_list50_p99_ms_before", statistics.median(idle) * 1000)
    bench.report("idle_list50_p99_ms_after", statistics.median(after) * 1000)
    bench.report("list50_p99_ms_readings", " ".join(  # the spread the medians hide
        f"{label}:" + ",".join(f"{reading * 1000:.1f}" for reading in readings)
        for label, readings in (("before", idle), ("fleet", fleet_readings),
                                ("after", after))))
    bench.report("line_visible_ms_p50", _percentile(delays, 50))
    bench.report("line_visible_ms_p99", _percentile(delays, 99))
    bench.report("line_visible_samples", len(delays))


def _settled(busy_below: float = 0.15, timeout_s: float = 60) -> None:
    """Wait (``timeout_s`` at most) until a whole second passes with the machine below
    ``busy_below`` of its CPU: a fleet's end (runners, sandboxes, their clean-up) is over,
    so an idle reading does not share the machine with it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = _cpu_ticks()
        time.sleep(1)
        after = _cpu_ticks()
        total = sum(after) - sum(before)
        idle = (after[3] + after[4]) - (before[3] + before[4])
        if total and 1 - idle / total < busy_below:
            return


def _cpu_ticks() -> list[int]:
    """The machine's CPU time so far, by kind (``/proc/stat``: user, nice, system, idle,
    iowait, …)."""
    return [int(field) for field in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]


def _line_delays(client: Fleet, sessions: list[str], seconds: int) -> list[float]:
    """Follow ``sessions`` for ``seconds`` (one poller each: a slow answer delays no other
    session): each stamped line's delay from printed to read, in ms. A window of its own,
    after the list's: ten pollers asking 50 times a second are the measurement's load, not
    the fleet's, and would otherwise count against the list's p99."""
    delays: list[float] = []
    stop = threading.Event()
    followers = [threading.Thread(target=client.follow, args=([session], stop, delays.append))
                 for session in sessions]
    for follower in followers:
        follower.start()
    time.sleep(seconds)
    stop.set()
    for follower in followers:
        follower.join()
    return delays


def _ingest_figures(bench: Harness, client: Fleet) -> None:
    """Lines taken in per second from 1 and from 50 backends printing flat out, against COPY
    of as many rows into the line table."""
    scale = 4 if bench.quick else 1
    for backends in (1, 50):
        each = FAST_LINES // scale // (1 if backends == 1 else 10)
        tasks = client.start_jobs(backends, {"prompt": f"lines: {each}"}, wait=False)
        per_s = client.ingest_rate(tasks, each)
        copy_per_s = asyncio.run(_copy_rate(client.url, each * backends))
        bench.report(f"output_lines_per_s_{backends}", per_s)
        bench.report(f"copy_lines_per_s_{backends}", copy_per_s)
        bench.report(f"output_lines_vs_copy_{backends}", per_s / copy_per_s)


class Fleet:
    """A client of one server: starts and ends jobs, reads what they cost."""

    def __init__(self, base: str, url: str) -> None:
        self.base = base
        self.url = url
        self.http = httpx.Client(base_url=base, timeout=120, headers=tools.auth_headers())
        self.submitted = 0

    def start_jobs(self, count: int, fields: dict[str, str], *, wait: bool = True
                   ) -> list[str]:
        """Submit and dispatch ``count`` tasks; with ``wait``, return once every job holds
        a lease and has reported its assembly (its backend runs: nothing more of its start
        reaches the ledger)."""
        tasks = []
        for _ in range(count):
            self.submitted += 1
            body: dict[str, Any] = {
                "tenantId": "bench", "projectId": "bench", "queue": "bench/fleet",
                "title": f"fleet {self.submitted}",
                "payload": {"prompt": fields["prompt"]}}
            if "backendProfile" in fields:
                body["backendProfile"] = fields["backendProfile"]
            task = self._ok(self.http.post("/api/v1/queue/tasks", json=body))["taskId"]
            self._ok(self.http.post(f"/api/v1/queue/tasks/{task}/dispatch"))
            tasks.append(task)
        if wait:
            self._until(lambda: self._live_leases() >= count, f"{count} jobs beating")
            self._until(lambda: self._assembled(tasks) >= count, f"{count} jobs assembled")
        return tasks

    def end(self, tasks: list[str]) -> None:
        """Cancel the tasks and wait until no job of theirs holds a lease."""
        for task in tasks:
            self._ok(self.http.post(f"/api/v1/queue/tasks/{task}/cancel",
                                    json={"reason": "bench over"}))
        self._until(lambda: self._live_leases() == 0, "every job ended")

    def sessions_of(self, tasks: list[str]) -> list[str]:
        """The session of each task's latest attempt."""
        return [self._ok(self.http.get(f"/api/v1/queue/tasks/{task}"))["latestAttempt"][
            "sessionId"] for task in tasks]

    def follow(self, sessions: list[str], stop: threading.Event,
               seen: Callable[[float], None]) -> None:
        """Poll the sessions' output until ``stop``; for each line stamped since the call,
        report the milliseconds from its printing to its reading (a line printed before it
        would count the time the follower was not looking)."""
        begun = time.time()
        after = dict.fromkeys(sessions, 0)
        with httpx.Client(base_url=self.base, timeout=30, headers=tools.auth_headers()) as http:
            while not stop.is_set():
                for session in sessions:
                    page = http.get(f"/api/v1/sessions/{session}/output",
                                    params={"afterSeq": after[session]}).json()
                    now = time.time()
                    for item in page["items"]:
                        word, _, stamp = item["line"].partition(" ")
                        if word == "stamp" and float(stamp) >= begun:
                            seen((now - float(stamp)) * 1000)
                    after[session] = page["nextAfterSeq"]
                time.sleep(0.02)

    def list_p99_readings(self, seconds: int) -> list[float]:
        """Three readings of the p99 (s) of a 50-task page with 16 clients while 16 others
        submit (one stall in a window of a few thousand answers is its p99: the caller
        takes a median)."""
        return [self._one_list_p99(seconds) for _ in range(3)]

    def _one_list_p99(self, seconds: int) -> float:
        submitting = threading.Thread(target=tools.wrk, args=(
            f"{self.base}/api/v1/queue/tasks",), kwargs={
            "clients": 16, "seconds": seconds, "script": "submit.lua",
            "timeout_s": WRK_TIMEOUT_S})
        tools.wrk(f"{self.base}/api/v1/queue/tasks?limit=50", clients=4, seconds=1)  # warm-up
        submitting.start()
        try:
            return tools.wrk(f"{self.base}/api/v1/queue/tasks?limit=50", clients=16,
                             seconds=seconds, timeout_s=WRK_TIMEOUT_S)[1]
        finally:
            submitting.join()

    def ingest_rate(self, tasks: list[str], each: int) -> float:
        """Lines per second the manager took in from the tasks' jobs: the lines over the
        span from the first line recorded to the last."""
        sessions = self.sessions_of(tasks)
        total = each * len(tasks)
        self._until(lambda: self._lines(sessions)[0] >= total, f"{total} lines stored",
                    timeout_s=600)
        count, span = self._lines(sessions)
        return count / span

    def heartbeats(self) -> int:
        """Heartbeats taken in so far by the live jobs (their lease rows' renewals)."""
        return int(self._query("SELECT coalesce(sum(renewals), 0) FROM runner_job_leases"))

    def line_batches(self) -> int:
        """Line batches taken in so far (the numbers of every job's last batch)."""
        return int(self._query("SELECT coalesce(sum(batch_seq), 0) FROM session_line_source"))

    def ledger_head(self) -> int:
        """The ledger's last change sequence."""
        return int(self._query("SELECT last_seq FROM ledger_head"))

    def entries_of(self, tasks: list[str]) -> int:
        """Ledger entries of the tasks' whole lives: their task streams and every stream of
        their runs, commands, runner jobs and sessions."""
        return int(self._query(
            "WITH ids AS (SELECT unnest(ARRAY[run_id, command_id, runner_job_id, session_id])"
            " AS id FROM attempt_summary WHERE task_id = ANY($1::text[]) UNION"
            " SELECT unnest($1::text[])) "
            "SELECT count(*) FROM ledger WHERE stream_id IN (SELECT id FROM ids)", tasks))

    def _assembled(self, tasks: list[str]) -> int:
        return int(self._query(
            "SELECT count(*) FROM ledger WHERE event_type = 'job-assembly-reported' AND"
            " stream_id IN (SELECT runner_job_id FROM attempt_summary"
            " WHERE task_id = ANY($1::text[]))", tasks))

    def _live_leases(self) -> int:
        return int(self._query("SELECT count(*) FROM runner_job_leases"))

    def _lines(self, sessions: list[str]) -> tuple[int, float]:
        row = asyncio.run(_fetchrow(
            self.url, "SELECT count(*) AS n, extract(epoch FROM max(recorded_at) -"
            " min(recorded_at)) AS span FROM session_line WHERE session_id = ANY($1::text[])"
            " AND channel = 'output' AND line LIKE 'line %'", sessions))
        return int(row["n"]), float(row["span"] or 0.0)

    def _query(self, sql: str, *args: object) -> Any:
        return asyncio.run(_fetchrow(self.url, sql, *args))[0]

    @staticmethod
    def _ok(answer: httpx.Response) -> Any:
        if answer.status_code >= 300:
            raise RuntimeError(f"{answer.request.url}: {answer.status_code} {answer.text}")
        return answer.json()

    @staticmethod
    def _until(done: Callable[[], bool], what: str, timeout_s: float = 300) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}")
            time.sleep(0.2)


async def _fetchrow(url: str, sql: str, *args: object) -> asyncpg.Record:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow(sql, *args)
        assert row is not None
        return row
    finally:
        await conn.close()


async def _copy_rate(url: str, rows: int) -> float:
    """Rows per second of ``COPY`` into ``session_line`` (rows of the shape the fleet's
    lines have), in a transaction rolled back afterwards."""
    now = datetime.now(UTC)
    records = [("bench-copy", "output", seq, "bench-copy-job", f"line {seq}", now)
               for seq in range(1, rows + 1)]
    conn = await asyncpg.connect(url)
    try:
        tx = conn.transaction()
        await tx.start()
        started = time.perf_counter()
        await conn.copy_records_to_table(
            "session_line", records=records,
            columns=["session_id", "channel", "seq", "runner_job_id", "line", "recorded_at"])
        elapsed = time.perf_counter() - started
        await tx.rollback()
        return rows / elapsed
    finally:
        await conn.close()


def _percentile(samples: list[float], pct: int) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]
