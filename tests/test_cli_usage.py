"""The ``svc`` program behaves like one: usage errors exit 2, unreachable things exit 3 with
a hint, ``svc serve`` refuses what it cannot serve before it announces anything, and the
embedded Postgres stops with the server."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from ledger.database import with_user
from tests.conftest import free_port, svc_executable
from tests.support import server_tmp
from tests.test_cli import svc


@pytest.mark.parametrize("args", [
    ("queue", "lsit"), ("queue", "list", "--stat", "running"),
    ("queue", "list", "--state", "bogus"), ("sessions", "ps", "--state", "bogus"),
    ("queue", "retry", "tsk_x", "--idempotency-key", "k"),
])
def test_usage_errors_exit_2(args: tuple[str, ...]) -> None:
    result = svc(*args, api="http://127.0.0.1:9")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_api_suggests_starting_the_service() -> None:
    result = svc("queue", "list", api="127.0.0.1:9")
    assert result.returncode == 3
    assert "cannot reach the API at http://127.0.0.1:9" in result.stderr
    assert "svc serve" in result.stderr


async def test_api_accepts_host_and_port(served_api: str) -> None:
    result = svc("queue", "list", "--raw", api=served_api.removeprefix("http://"))
    assert result.returncode == 0, result.stderr
    assert "items" in json.loads(result.stdout)


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {"PATH": os.environ.get("PATH", ""), "SVC_DATA_DIR": str(tmp_path / "data"), **env}
    return subprocess.run([svc_executable(), "serve"], capture_output=True, text=True,
                          env=full, timeout=120)


def test_serve_refuses_a_port_out_of_range(tmp_path: Path) -> None:
    result = _serve(tmp_path, SVC_PORT="99999", SVC_DATABASE_URL="postgresql://x@127.0.0.1:9/x")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: invalid-request: SVC_PORT/--port must be between "
                                     "1 and 65535, not 99999")
    assert result.stdout == ""


def test_serve_refuses_a_port_in_use_before_the_banner(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = _serve(tmp_path, SVC_PORT=str(port),
                        SVC_DATABASE_URL="postgresql://x@127.0.0.1:9/x")
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.stderr


def test_serve_reports_an_unreachable_database_in_one_line(tmp_path: Path) -> None:
    result = _serve(tmp_path, SVC_PORT=str(free_port()),
                    SVC_DATABASE_URL="postgresql://svc@127.0.0.1:9/svc")
    assert result.returncode == 3
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: infra-failed: cannot use the database")
    assert "svc serve" not in result.stdout


def _embedded_postgres_running(data: Path) -> bool:
    found = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True).stdout
    return any(str(data / "pg") in line and "postgres" in line for line in found.splitlines())


def _workers_of(pid: int) -> list[int]:
    """The uvicorn worker processes (``multiprocessing`` spawns) of ``svc serve`` ``pid``."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children
            if "spawn_main" in Path(f"/proc/{child}/cmdline").read_text()]


def _relay_socket_of(pid: int) -> str:
    """The ledger relay socket worker ``pid`` writes through (its settings are handed over
    in a pipe): the named end of its connection to a relay, as ``ss`` pairs them. A worker
    may still be starting when another one first answers: as long as the server's start."""
    deadline = time.monotonic() + 90
    while True:
        listed = subprocess.run(["ss", "-xpnH"], capture_output=True, text=True).stdout
        rows = [line.split() for line in listed.splitlines()]
        named = {row[5]: row[4] for row in rows if len(row) > 7 and row[4] != "*"}
        for row in rows:
            if len(row) > 8 and f"pid={pid}," in row[8] and "svc-ledger-" in named.get(
                    row[7], ""):
                return named[row[7]]
        assert time.monotonic() < deadline, f"worker {pid} has no relay connection"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize(("stop", "workers"), [
    (signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGTERM, 2), (signal.SIGINT, 2)])
def test_the_embedded_postgres_stops_with_the_server(stop: signal.Signals,
                                                     workers: int) -> None:
    with server_tmp("svc-stop-") as tmp_path:
        _serve_then_stop(tmp_path, stop, workers)


def _serve_then_stop(tmp_path: Path, stop: signal.Signals, workers: int) -> None:
    port = free_port()
    env = {"PATH": os.environ.get("PATH", ""), "SVC_DATA_DIR": str(tmp_path / "data"),
           "SVC_PORT": str(port), "SVC_SHUTDOWN_GRACE_S": "2", "SVC_WORKERS": str(workers)}
    env.pop("SVC_DATABASE_URL", None)
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen([svc_executable(), "serve"], env=env, stdout=log, stderr=log)
    pids = tmp_path / "data" / "pg" / ".handle_pids.json"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "serve.log").read_text()
            time.sleep(0.2)
        assert _embedded_postgres_running(tmp_path / "data")
        # with two or more, the runner listener's worker too (api.runner_listener)
        expected = workers + 1 if workers > 1 else 0
        while len(spawned := _workers_of(process.pid)) < expected:
            assert time.monotonic() < deadline, spawned
            time.sleep(0.1)
        assert len(spawned) == expected
        relays = {_relay_socket_of(pid) for pid in spawned}
        assert len(relays) == (1 if workers > 1 else 0)  # every worker writes through one
        assert all(Path(socket).is_socket() for socket in relays)
        if pids.exists():  # the database was started by the supervisor alone, once
            assert json.loads(pids.read_text()) == [process.pid]
        process.send_signal(stop)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert not any(_alive(pid) for pid in spawned)
    assert not any(Path(socket).parent.exists() for socket in relays)
    deadline = time.monotonic() + 15
    while _embedded_postgres_running(tmp_path / "data") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _embedded_postgres_running(tmp_path / "data")
    assert not pids.exists() or json.loads(pids.read_text()) == []


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_exits_3_when_its_workers_cannot_start(database_url: str, tmp_path: Path,
                                                     workers: str) -> None:
    result = _serve(tmp_path, SVC_WORKERS=workers, SVC_PORT=str(free_port()),
                    SVC_SHUTDOWN_GRACE_S="2", SVC_MIGRATE_DATABASE_URL=database_url,
                    SVC_DATABASE_URL=with_user(database_url, "no_such_role"))
    assert result.returncode == 3, result.stderr
    assert "svc serving on" in result.stdout  # migrated as the owner, then failed to serve
    if workers == "2":
        assert result.stderr.strip().endswith("error: infra-failed: a worker could not start "
                                              "(see the log above); every worker was stopped")


@pytest.mark.parametrize("workers", ["0", "65"])
def test_serve_refuses_a_worker_count_out_of_range(tmp_path: Path, workers: str) -> None:
    result = _serve(tmp_path, SVC_WORKERS=workers, SVC_PORT=str(free_port()),
                    SVC_DATABASE_URL="postgresql://x@127.0.0.1:9/x")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: invalid-request: SVC_WORKERS/--workers must be "
                                     f"between 1 and 64, not {workers}")
    assert result.stdout == ""


@pytest.mark.parametrize("args", [("ledger", "replay", "--verify"), ("ledger", "anchor")])
def test_ledger_commands_refuse_a_directory_without_service_data(tmp_path: Path,
                                                                  args: tuple[str, ...]) -> None:
    result = subprocess.run([svc_executable(), *args], capture_output=True, text=True,
                            cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")}, timeout=60)
    assert result.returncode == 3
    assert result.stderr.startswith("error: not-found: no service database under")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / ".svc").exists()  # nothing created, no Postgres started


async def test_an_empty_prompt_creates_no_session(served_api: str) -> None:
    before = svc("sessions", "ps", "--state", "all", "--raw", api=served_api)
    result = svc("sessions", "send", "--prompt", "", api=served_api)
    assert result.returncode == 2
    assert "error: invalid-request: the prompt must be 1 to 65536 characters" in result.stderr
    after = svc("sessions", "ps", "--state", "all", "--raw", api=served_api)
    assert json.loads(after.stdout)["items"] == json.loads(before.stdout)["items"]


def test_help_text_reads_as_written() -> None:
    send = svc("sessions", "send", "--help").stdout
    assert "svc sessions send ses_… --prompt-stdin" in send  # no markdown eating "_"
    validate = svc("manifest", "validate", "--help").stdout
    assert "--empty-files" not in validate and "endpoint endpoint" not in validate
    submit = svc("queue", "submit", "--help").stdout
    assert '"title": "Fix", "payload": {"prompt": "…"}}\' |' in submit
    for listing in (svc("queue", "list", "--help").stdout, svc("sessions", "ps", "--help").stdout):
        state_line = next(line for line in listing.splitlines() if "--state" in line)
        assert "[choices" not in state_line.split("--state", 1)[1][:20]  # a description first
