"""``make bench``: svc's figures next to baselines measured in the same run on the same
Postgres (pgbench, Procrastinate, PgQueuer, a bare ``python`` spawn), printed one per line as
``name=value``: the ratios first, each with the absolute figures it comes from.

    python -m tests.benchmarks.run [--quick] [--only PART ...]
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import msgspec

from api.auth_principal import key_sha256, new_key
from ledger.database import start_embedded
from ledger.migrate import migrate
from tests.benchmarks import fleet, health, masking, tools
from tests.benchmarks.load import load
from tests.support import with_database, write_profile_secret

RESULTS = Path(__file__).parent / "results"


class Bench:
    """One run: a private embedded Postgres, databases per measurement, the figures."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.seconds = 4 if quick else 10
        self.workdir = Path(tempfile.mkdtemp(prefix="svc-bench-"))
        # the last thing at exit (registered first): the embedded server's own exit handler
        # makes its runtime folder (XDG_RUNTIME_DIR) below the work folder again
        atexit.register(shutil.rmtree, self.workdir, True)
        self.pgdata = self.workdir / "pg"
        self.server = start_embedded(self.pgdata)
        self.admin = self.server.get_uri("postgres")
        self.figures: dict[str, str] = {}
        self.server_group = 0
        """Process group of the running ``svc serve`` (its pid): its CPU time is measured."""

    def report(self, name: str, value: float | int | str) -> None:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        self.figures[name] = text
        print(f"{name}={text}", flush=True)

    def database(self, name: str) -> str:
        async def create() -> str:
            conn = await asyncpg.connect(self.admin)
            try:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                await conn.execute(f'CREATE DATABASE "{name}"')
            finally:
                await conn.close()
            url = with_database(self.admin, name)
            conn = await asyncpg.connect(url)
            try:
                await migrate(conn)
                await conn.execute("CREATE TABLE bench_insert (id bigint, payload text)")
            finally:
                await conn.close()
            return url

        return asyncio.run(create())

    @contextlib.contextmanager
    def api(self, url: str, *serve_args: str,
            env: dict[str, str] | None = None) -> Iterator[str]:
        port = tools_free_port()
        env = {"PATH": os.environ["PATH"], "SVC_DATABASE_URL": url, "SVC_PORT": str(port),
               "SVC_DATA_DIR": str(self.workdir / "data"),
               "SVC_ADMIN_KEY_SHA256": key_sha256(os.environ["SVC_TOKEN"]), **(env or {})}
        if "PYTHONPATH" in os.environ:  # benchmarking another checkout with this venv
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        svc = str(Path(sys.executable).with_name("svc"))
        log = (self.workdir / f"serve-{port}.log").open("w")
        process = subprocess.Popen([svc, "serve", *serve_args], env=env, stdout=log,
                                   stderr=log, start_new_session=True)
        self.server_group = process.pid
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/api/v1/health").status_code == 200:
                        break
                if process.poll() is not None:
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("the API did not start")
            if process.poll() is not None:
                raise RuntimeError((self.workdir / f"serve-{port}.log").read_text())
            try:
                yield base
            except Exception:
                print((self.workdir / f"serve-{port}.log").read_text()[-3000:], file=sys.stderr)
                raise
        finally:
            _stop(process)
            log.close()

    def submit_figures(self) -> None:
        """Submit over HTTP against the peers' defer, 16 clients and 1, measured in
        :data:`SUBMIT_ROUNDS` interleaved rounds (svc and each peer in turn, every round):
        the machine's speed drifts by a factor of two within a minute here (other guests'
        steal), so a ratio is the median of the rounds' own ratios, and each rate the median
        of its rounds. A poller follows ``updatedAfter`` through every svc run."""
        pg_url = self.database("bench_pgbench")
        pg16 = tools.pgbench(pg_url, "submit_txn.sql", 16, self.seconds)
        pg1 = tools.pgbench(pg_url, "submit_txn.sql", 1, self.seconds)
        insert16 = tools.pgbench(pg_url, "single_insert.sql", 16, self.seconds)
        insert1 = tools.pgbench(pg_url, "single_insert.sql", 1, self.seconds)
        peer_urls = {peer: self.database(f"bench_{peer}") for peer in PEERS}
        api_url = self.database("bench_submit")
        seconds = max(2, self.seconds // 2)
        rounds: list[dict[tuple[str, int], float]] = []
        cpu = served = 0.0
        with self.api(api_url) as base, _followed(base, api_url) as poll:
            for _ in range(SUBMIT_ROUNDS):
                rates: dict[tuple[str, int], float] = {}
                for clients in (16, 1):
                    for peer in PEERS:
                        rates[(peer, clients)] = tools.peer_rate(
                            peer_urls[peer], peer, clients, seconds)
                    before = tools.group_cpu_seconds(self.server_group)
                    rates[("svc", clients)], _ = tools.wrk(
                        f"{base}/api/v1/queue/tasks", clients=clients, seconds=seconds,
                        script="submit.lua")
                    cpu += tools.group_cpu_seconds(self.server_group) - before
                    served += rates[("svc", clients)] * seconds
                rounds.append(rates)

        def median(name: str, clients: int) -> float:
            return statistics.median(r[(name, clients)] for r in rounds)

        for clients, insert in ((16, insert16), (1, insert1)):
            for peer in PEERS:
                ratios = [r[("svc", clients)] / r[(peer, clients)] for r in rounds]
                self.report(f"submit_vs_{peer}_{clients}", statistics.median(ratios))
                self.report(f"submit_vs_{peer}_{clients}_rounds",
                            " ".join(f"{ratio:.3f}" for ratio in ratios))
            self.report(f"submit_vs_insert_{clients}", median("svc", clients) / insert)
        for clients in (16, 1):
            self.report(f"http_submit_rps_{clients}", median("svc", clients))
            self.report(f"procrastinate_defer_per_s_{clients}",
                        median("procrastinate", clients))
            self.report(f"pgqueuer_enqueue_per_s_{clients}", median("pgqueuer", clients))
        self.report("submit_rounds", SUBMIT_ROUNDS)
        self.report("pgbench_single_insert_tps_16", insert16)
        self.report("pgbench_single_insert_tps_1", insert1)
        self.report("pgbench_submit_txn_tps_16", pg16)
        self.report("pgbench_submit_txn_tps_1", pg1)
        self.report("http_submit_server_cpu_ms_per_req", cpu * 1000 / served)
        self.report("projection_cost", pg16 / insert16)
        self.report("commit_scaling", (median("svc", 16) / median("svc", 1)) / (pg16 / pg1))
        self.report("poll_tasks_checked", poll.checked)
        self.report("poll_missed", poll.missed)

    def batch_figures(self) -> None:
        """Batch submit (``POST /queue/tasks/batch``, :data:`BATCH_SIZE` tasks a request,
        each under its own key, 16 connections) against the peers' own batch APIs with
        batches of the same size (in-process, 16 coroutines): tasks per second."""
        size = str(BATCH_SIZE)
        peers = {peer: tools.peer_rate(self.database(f"bench_{peer}_batch"), f"{peer}-batch",
                                       16, self.seconds, size)
                 for peer in ("procrastinate", "pgqueuer")}
        url = self.database("bench_batch")
        path = "/api/v1/queue/tasks/batch"
        with self.api(url) as base:
            tools.wrk(base + path, clients=4, seconds=1, script="batch.lua",
                      script_args=(size, "warm"), timeout_s=30)
            cpu = tools.group_cpu_seconds(self.server_group)
            requests, _ = tools.wrk(base + path, clients=16, seconds=self.seconds,
                                    script="batch.lua", script_args=(size, "run"),
                                    timeout_s=30)  # 1,600 tasks in flight
            cpu = tools.group_cpu_seconds(self.server_group) - cpu
        ours = requests * BATCH_SIZE
        self.report("batch_submit_vs_procrastinate_batch", ours / peers["procrastinate"])
        self.report("batch_submit_vs_pgqueuer_batch", ours / peers["pgqueuer"])
        self.report("http_batch_submit_tasks_per_s_16", ours)
        self.report("procrastinate_batch_defer_per_s_16", peers["procrastinate"])
        self.report("pgqueuer_batch_enqueue_per_s_16", peers["pgqueuer"])
        self.report("http_batch_submit_server_cpu_ms_per_task",
                    cpu * 1000 / (ours * self.seconds))

    def list_figures(self) -> None:
        """A 50-row page over HTTP against pgbench's 50-row SELECT from a table of the task
        summary's width (a copy of it), and the other reads' rates."""
        url = self.database("bench_list")
        tasks = 2_000 if self.quick else 10_000
        asyncio.run(load(url, tasks=tasks, reads=tasks // 2, cancels=tasks // 4, seed=tasks))
        task_id = asyncio.run(_copy_task_summary(url))
        select16 = tools.pgbench(url, "select50.sql", 16, self.seconds)
        select1 = tools.pgbench(url, "select50.sql", 1, self.seconds)
        paths = {"list50": "/api/v1/queue/tasks?limit=50",
                 "show": f"/api/v1/queue/tasks/{task_id}",
                 "stats": "/api/v1/queue/stats",
                 "commander": "/api/v1/queue/commander?readerId=reader-0&limit=20",
                 "health": "/api/v1/health"}
        rates: dict[tuple[str, int], float] = {}
        list_cpu_ms = 0.0
        with self.api(url) as base:
            for name, path in paths.items():
                tools.wrk(base + path, clients=4, seconds=1)  # warm-up
                for clients in (16, 1) if name == "list50" else (16,):
                    cpu = tools.group_cpu_seconds(self.server_group)
                    rates[(name, clients)] = tools.wrk(base + path, clients=clients,
                                                       seconds=self.seconds)[0]
                    if (name, clients) == ("list50", 16):
                        cpu = tools.group_cpu_seconds(self.server_group) - cpu
                        list_cpu_ms = cpu * 1000 / (rates[(name, clients)] * self.seconds)
        self.report("list50_vs_select_16", rates[("list50", 16)] / select16)
        self.report("list50_vs_select_1", rates[("list50", 1)] / select1)
        self.report("http_list50_rps_16", rates[("list50", 16)])
        self.report("http_list50_rps_1", rates[("list50", 1)])
        self.report("pgbench_select50_tps_16", select16)
        self.report("pgbench_select50_tps_1", select1)
        self.report("http_list50_server_cpu_ms_per_req", list_cpu_ms)
        for name in ("show", "stats", "commander", "health"):
            self.report(f"http_{name}_rps_16", rates[(name, 16)])

    def cli_figures(self) -> None:
        """``svc queue list`` (a page of 50) against a running server, next to what it is
        made of, measured in turn with it: the interpreter's start (``python -c pass``)
        and the same request with ``curl``; the bytecode compiled first, as an install
        has it (``scripts/compile_cli.py``)."""
        url = self.database("bench_cli")
        asyncio.run(load(url, tasks=100, reads=50, cancels=25, seed=100))
        subprocess.run([sys.executable, str(Path(__file__).parents[2] / "scripts" /
                                            "compile_cli.py")], check=True,
                       stdout=subprocess.DEVNULL)
        with self.api(url) as base:
            header = "".join(f"{k}: {v}" for k, v in tools.auth_headers().items())
            runs = tools.paired_runs({
                "cli": [str(Path(sys.executable).with_name("svc")), "queue", "list",
                        "--api", base],
                "python": [sys.executable, "-c", "pass"],
                "curl": ["curl", "-sSf", "-H", header, f"{base}/api/v1/queue/tasks"]},
                7 if self.quick else 21)
        wall = {name: statistics.median(walls) for name, (walls, _) in runs.items()}
        self.report("cli_list_vs_python_start", wall["cli"] / wall["python"])
        self.report("cli_list_vs_curl", wall["cli"] / wall["curl"])
        self.report("cli_list_s_median", wall["cli"])
        self.report("cli_list_cpu_s_median", statistics.median(runs["cli"][1]))
        self.report("python_start_s_median", wall["python"])
        self.report("curl_list_s_median", wall["curl"])

    def workers_figures(self) -> None:
        """Submit with ``svc serve --workers 2`` against ``--workers 1`` (16 clients), with
        the poller checking that no change is missed across processes."""
        if "--workers" not in _serve_help():
            self.report("workers2_vs_1", "n/a (svc serve has no --workers option yet)")
            return
        rates: dict[int, float] = {}
        for workers in (1, 2):
            url = self.database(f"bench_workers{workers}")
            with self.api(url, "--workers", str(workers)) as base, \
                    _followed(base, url) as poll:
                rates[workers], _ = tools.wrk(f"{base}/api/v1/queue/tasks", clients=16,
                                              seconds=self.seconds, script="submit.lua")
            self.report(f"http_submit_rps_16_workers{workers}", rates[workers])
            self.report(f"poll_missed_workers{workers}", poll.missed)
        self.report("workers2_vs_1", rates[2] / rates[1])

    def read_figures(self) -> None:
        url = self.database("bench_read")
        small, large = (1_000, 20_000) if self.quick else (1_000, 100_000)
        paths = {"list": "/api/v1/queue/tasks?limit=50",
                 "stats": "/api/v1/queue/stats",
                 "commander": "/api/v1/queue/commander?readerId=reader-0&limit=20"}
        p99: dict[tuple[str, int], float] = {}
        loaded = 0
        for size in (small, large):
            asyncio.run(load(url, tasks=size - loaded, reads=(size - loaded) // 2,
                             cancels=(size - loaded) // 4, seed=size))
            loaded = size
            asyncio.run(_analyze(url))
            with self.api(url) as base:
                for name, path in paths.items():
                    tools.wrk(base + path, clients=4, seconds=2)  # warm-up
                    runs = sorted(tools.wrk(base + path, clients=4, seconds=self.seconds)[1]
                                  for _ in range(3))
                    p99[(name, size)] = runs[1]  # the median of three p99 readings
        for name in paths:
            self.report(f"read_p99_ms_{name}_{small}", p99[(name, small)] * 1000)
            self.report(f"read_p99_ms_{name}_{large}", p99[(name, large)] * 1000)
            self.report(f"read_ratio_{name}", p99[(name, large)] / p99[(name, small)])

    def replay_figures(self) -> None:
        url = self.database("bench_replay")
        sizes = (20_000, 200_000) if self.quick else (100_000, 1_000_000)
        events = 0
        for size in sizes:
            todo = size - events
            events += asyncio.run(load(url, tasks=todo // 2, reads=todo * 3 // 10,
                                       cancels=todo // 5, seed=size))
            asyncio.run(_analyze(url))
            output = subprocess.run(
                tools.python_module("tests.benchmarks.replay_child", url),
                capture_output=True, text=True, check=True).stdout
            result = msgspec.json.decode(output)
            rss = result["peak_rss_mib"]  # measured in the child: a fork inherits our RSS
            assert result["ok"], "replay found differences"
            per_s = result["events"] / result["seconds"]
            copy_per_s = tools.copy_rows_per_second(url, result["events"])
            label = f"{result['events'] // 1000}k"
            self.report(f"replay_events_{label}", result["events"])
            self.report(f"replay_events_per_s_{label}", per_s)
            self.report(f"copy_rows_per_s_{label}", copy_per_s)
            self.report(f"replay_ratio_{label}", per_s / copy_per_s)
            self.report(f"replay_peak_rss_mb_{label}", rss)

    def dispatch_figures(self) -> None:
        url = self.database("bench_dispatch")
        write_profile_secret(self.workdir / "data")
        with self.api(url) as base:
            created, started, retries = asyncio.run(_dispatch_latencies(
                base, self.workdir / "data" / "jobs", 10 if self.quick else 30))
        spawn = _spawn_baseline(10 if self.quick else 30)
        self.report("python_spawn_ms_p50", _percentile(spawn, 50))
        for name, samples in (("dispatch_created_ms", created),
                              ("dispatch_backend_started_ms", started),
                              ("retry_50_same_key_ms", retries)):
            self.report(f"{name}_p50", _percentile(samples, 50))
            self.report(f"{name}_p99", _percentile(samples, 99))
        self.report("dispatch_started_vs_spawn_p50",
                    _percentile(started, 50) / _percentile(spawn, 50))

    def fleet_figures(self) -> None:
        write_profile_secret(self.workdir / "data")
        write_profile_secret(self.workdir / "data", fleet.STAMP_PROFILE)
        fleet.figures(self)

    def mask_figures(self) -> None:
        masking.figures(self.report)

    def health_figures(self) -> None:
        url = self.database("bench_health")
        with self.api(url) as base:
            health.figures(self.report, base, self.seconds)

    def close(self) -> None:
        self.server.cleanup()
        shutil.rmtree(self.workdir, ignore_errors=True)


@dataclass
class PollCheck:
    """What the poller of :func:`_followed` missed of the tasks' final versions."""

    missed: int = 0
    checked: int = 0


@contextlib.contextmanager
def _followed(base: str, url: str) -> Iterator[PollCheck]:
    """A poller follows ``updatedAfter`` while the block submits; after it, every task's
    final version must have been seen (the check is filled in)."""
    check = PollCheck()
    poller = tools.Poller(base)
    poller.start()
    try:
        yield check
        asyncio.run(_settled(url))  # wrk leaves requests in flight: they still commit
    finally:
        poller.stop()
    final = asyncio.run(_versions(url))
    check.missed = sum(1 for task_id, v in final.items() if poller.seen.get(task_id) != v)
    check.checked = len(final)


def _serve_help() -> str:
    """``svc serve --help``: which options this checkout's server has."""
    svc = str(Path(sys.executable).with_name("svc"))
    return subprocess.run([svc, "serve", "--help"], capture_output=True, text=True,
                          timeout=60).stdout


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End a server started by the harness, and every process of its group (workers)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def tools_free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(samples: list[float], pct: int) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def _spawn_baseline(n: int) -> list[float]:
    """Milliseconds to start and finish ``python -c pass``: the floor of a local job."""
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def _dispatch_latencies(base: str, jobs: Path,
                              n: int) -> tuple[list[float], list[float], list[float]]:
    body = {"tenantId": "bench", "projectId": "bench", "queue": "bench", "title": "bench",
            "payload": {"prompt": "exit: 1"}}
    created, started, retries = [], [], []
    async with httpx.AsyncClient(base_url=base, timeout=120,
                                 headers=tools.auth_headers()) as http:
        for _ in range(n):
            task_id = (await http.post("/api/v1/queue/tasks", json=body)).json()["taskId"]
            begin = time.perf_counter()
            task = (await http.post(f"/api/v1/queue/tasks/{task_id}/dispatch")).json()
            created.append((time.perf_counter() - begin) * 1000)
            prompt = jobs / task["latestAttempt"]["runnerJobId"] / "prompt.txt"
            while not prompt.exists():
                await asyncio.sleep(0.002)
            started.append((time.perf_counter() - begin) * 1000)
        tasks = [t["taskId"] for t in (await http.get(
            "/api/v1/queue/tasks", params={"limit": 5})).json()["items"]]
        for task_id in tasks:
            while (await http.post(f"/api/v1/queue/tasks/{task_id}/refresh")).json()[
                    "state"] == "running":
                await asyncio.sleep(0.05)
            retry = {"idempotencyKey": "bench", "reason": "bench"}

            async def one(task_id: str = task_id, retry: dict[str, str] = retry) -> float:
                begin = time.perf_counter()
                answer = await http.post(f"/api/v1/queue/tasks/{task_id}/retry", json=retry)
                assert answer.status_code == 200, answer.text
                return (time.perf_counter() - begin) * 1000

            retries += await asyncio.gather(*(one() for _ in range(50)))
    return created, started, retries


async def _settled(url: str, quiet_s: float = 0.3) -> None:
    """Return once the ledger head has not moved for ``quiet_s``: the requests ``wrk`` left
    in flight have committed, so the poller's drain can see every one of them."""
    conn = await asyncpg.connect(url)
    try:
        head, quiet_since = None, time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            now = await conn.fetchval("SELECT last_seq FROM ledger_head")
            if now != head:
                head, quiet_since = now, time.monotonic()
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


async def _versions(url: str) -> dict[str, int]:
    conn = await asyncpg.connect(url)
    try:
        return {r["task_id"]: r["version"]
                for r in await conn.fetch("SELECT task_id, version FROM task_summary")}
    finally:
        await conn.close()


async def _copy_task_summary(url: str) -> str:
    """Copy ``task_summary`` into ``bench_summary`` (same columns, indexed on change_seq) for
    pgbench's SELECT; return one task id for the show route."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_summary")
        await conn.execute("CREATE TABLE bench_summary AS SELECT * FROM task_summary")
        await conn.execute("CREATE UNIQUE INDEX ON bench_summary (change_seq)")
        await conn.execute("VACUUM ANALYZE")
        return str(await conn.fetchval(
            "SELECT task_id FROM task_summary ORDER BY change_seq DESC LIMIT 1"))
    finally:
        await conn.close()


async def _analyze(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()


BATCH_SIZE = 100
"""Tasks per request of the ``batch`` part (and per call of the peers' batch APIs)."""
PEERS = ("procrastinate", "pgqueuer")
"""The peer queues every submit round measures (``peers.py``)."""
SUBMIT_ROUNDS = 5
"""Interleaved rounds of the submit part (svc and each peer in every round)."""
PARTS = ["submit", "batch", "list", "workers", "dispatch", "read", "replay", "mask", "health",
         "fleet", "cli"]
"""Every part of a run, in order (the ratios of issue 16 first)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short runs, smaller data")
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="run only this part (repeatable)")
    args = parser.parse_args()
    parts = args.only or PARTS
    uses_wrk = {"submit", "batch", "list", "workers", "read", "fleet"}
    if uses_wrk & set(parts) and shutil.which("wrk") is None:
        print("wrk is missing: apt-get install wrk (make bench does this)", file=sys.stderr)
        return 1
    os.environ["SVC_TOKEN"] = new_key()  # the servers' admin key (SVC_ADMIN_KEY_SHA256)
    bench = Bench(args.quick)
    try:
        for part in parts:
            getattr(bench, f"{part}_figures")()
    finally:
        bench.close()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.txt").write_text(
        "".join(f"{k}={v}\n" for k, v in bench.figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
