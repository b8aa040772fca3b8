"""The backend's own network (issue 26 item 4, DESIGN 13): a sandboxed local backend runs as
a user other than root, in its own network namespace connected by pasta. It reaches the
network outside the host, but not the service's API, its database or any other loopback
service of the host -- nor a host service through the host's own address -- except the host
loopback ports the operator forwards (``SVC_BACKEND_LOOPBACK_PORTS``), which ``svc serve``
refuses for the API's and the database's ports. Without pasta the sandboxed local driver
refuses to start (``infra-failed`` naming pasta and ``SVC_LOCAL_SANDBOX``)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from runner_assembly.drivers import DriverError
from runner_assembly.drivers.local import LocalDriver
from runner_assembly.runner import netns, network
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client, free_port, svc_executable
from tests.test_dispatch import dispatch, job_dirs, settle, submit
from tests.test_sandbox import outcomes  # each probe's outcome line, by its label

BANNER = b"forwarded-service-hello\n"
PROBE = '''\
import json, socket, subprocess, sys
targets = json.loads(sys.stdin.read())
print("probe uid", subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip())
for label, (host, port) in sorted(targets.items()):
    try:
        with socket.create_connection((host, port), timeout=5) as conn:
            conn.settimeout(5)
            said = conn.recv(64) if label == "forwarded" else b""
        print(f"probe {label} reached {said!r}")
    except OSError as error:
        print(f"probe {label} {type(error).__name__}")
'''


@contextlib.asynccontextmanager
async def tcp_service(host: str, greeting: bytes = b"") -> AsyncIterator[int]:
    """A TCP service on ``host`` (a free port) that greets each connection; its port."""
    async def greet(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(greeting)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, host, 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def database_on_tcp(database_url: str) -> AsyncIterator[int]:
    """The test database's TCP port on loopback: its own, or (the embedded server listens
    on a Unix socket only) a loopback relay to its socket."""
    parts = urllib.parse.urlsplit(database_url)
    if parts.hostname and parts.port:
        yield parts.port
        return
    folder = urllib.parse.parse_qs(parts.query)["host"][0]
    socket_path = next(Path(folder).glob(".s.PGSQL.*"))

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        db_reader, db_writer = await asyncio.open_unix_connection(str(socket_path))

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, db_writer), pipe(db_reader, writer))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()


def host_address() -> str | None:
    """This machine's address on its default route's interface, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.254", 9))  # no packet is sent: the route's source address
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


def outside_target() -> tuple[str, int] | None:
    """A TCP endpoint outside this machine that the machine itself reaches: the first
    non-loopback name server of ``/etc/resolv.conf`` on port 53."""
    try:
        lines = Path("/etc/resolv.conf").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if fields[:1] == ["nameserver"] and len(fields) > 1 and "." in fields[1] \
                and not fields[1].startswith("127."):
            try:
                socket.create_connection((fields[1], 53), timeout=3).close()
            except OSError:
                return None
            return fields[1], 53
    return None


async def test_a_sandboxed_backend_reaches_neither_the_api_nor_the_database_but_what_is_forwarded(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    address = host_address()
    async with tcp_service("127.0.0.1", BANNER) as forwarded, \
            tcp_service("0.0.0.0", b"not-forwarded\n") as other, \
            database_on_tcp(database_url) as db_port:
        conn = await asyncpg.connect(f"postgresql://127.0.0.1:{db_port}"
                                     f"{urllib.parse.urlsplit(database_url).path}",
                                     user=urllib.parse.urlsplit(database_url).username)
        await conn.close()  # the port is the database's, as the host sees it
        settings = dataclasses.replace(
            runner_settings, backend_loopback_ports=(forwarded,),
            backend_commands={**runner_settings.backend_commands,
                              "profile-1": (sys.executable, str(script))})
        async with app_client(database_url, settings) as client:
            api_port = client.base_url.port
            assert (await client.get("/api/v1/health")).json()["backendNetwork"] == "pasta"
            targets: dict[str, tuple[str, int]] = {
                "api": ("127.0.0.1", api_port), "database": ("127.0.0.1", db_port),
                "other-loopback": ("127.0.0.1", other), "forwarded": ("127.0.0.1", forwarded)}
            if address is not None:
                targets["host-address"] = (address, other)
            outside = outside_target()
            if outside is not None:
                targets["outside"] = outside
            task_id = await submit(client, json.dumps(targets))
            await dispatch(client, task_id)
            done = await settle(client, task_id, timeout=60)
    assert done["state"] == "completed", done["latestAttempt"]
    (job,) = job_dirs(settings)
    seen = outcomes(job)
    assert seen["uid"] != "0" and seen["uid"].isdigit(), seen
    assert seen["api"] == "ConnectionRefusedError", seen
    assert seen["database"] == "ConnectionRefusedError", seen
    assert seen["other-loopback"] == "ConnectionRefusedError", seen
    assert seen["forwarded"] == f"reached {BANNER!r}", seen
    if address is not None:  # the host's own address is the namespace's: nothing there
        assert seen["host-address"] == "ConnectionRefusedError", seen
    if outside is not None:  # the network beyond the host: reached, as from the host
        assert seen["outside"].startswith("reached"), seen


def test_without_pasta_the_sandboxed_local_driver_refuses_to_start(
    runner_settings: RunnerSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    bwrap = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True, text=True)
    (tools / "bwrap").symlink_to(bwrap.stdout.strip())
    monkeypatch.setenv("PATH", str(tools))
    with pytest.raises(DriverError) as refused:
        LocalDriver(runner_settings.jobs_dir, runner_settings.sessions_dir)
    assert refused.value.kind == "infra-failed"
    assert "pasta" in str(refused.value) and "passt" in str(refused.value)
    assert "SVC_LOCAL_SANDBOX=off" in str(refused.value)
    off = LocalDriver(runner_settings.jobs_dir, runner_settings.sessions_dir, sandbox="off")
    assert off.network is None and off.bwrap is None


def test_the_launcher_starts_no_backend_when_pasta_cannot_connect(tmp_path: Path) -> None:
    """A pasta that fails (here: ``false``): the backend never runs, the launcher says why."""
    marker = tmp_path / "ran"
    bwrap = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True,
                           text=True).stdout.strip()
    command = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--bind",
               str(tmp_path), str(tmp_path), "--die-with-parent", "--", "/usr/bin/touch",
               str(marker)]
    done = subprocess.run([sys.executable, "-m", "runner_assembly.runner.netns", "--pasta",
                           "/bin/false", "--", *command], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == netns.NO_NETWORK, done.stderr
    assert "network could not be connected" in done.stderr
    assert not marker.exists(), "the backend did not start"


def test_pasta_ends_with_the_sandbox(tmp_path: Path) -> None:
    """The launcher becomes bwrap; its pasta child is gone once the sandbox has ended."""
    bwrap = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True,
                           text=True).stdout.strip()
    command = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--dev", "/dev",
               "--die-with-parent", "--", "/bin/sh", "-c", "ip -o route; read line"]
    launcher = subprocess.Popen([sys.executable, "-m", "runner_assembly.runner.netns",
                                 "--pasta", network.find_pasta(), "--", *command],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert launcher.stdin is not None and launcher.stdout is not None
    route = launcher.stdout.readline()  # the sandbox runs: its network is configured
    assert route.startswith("default via"), route
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
    pasta = [pid for pid in children
             if Path(f"/proc/{pid}/comm").read_text().strip().startswith("pas")]
    assert len(pasta) == 1, children
    launcher.stdin.write("done\n")
    launcher.stdin.close()
    assert launcher.wait(timeout=60) == 0
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pasta[0]}").exists() and \
            Path(f"/proc/{pasta[0]}/stat").read_text().split(")")[-1].split()[0] != "Z":
        assert time.monotonic() < deadline, "pasta ended with the sandbox"
        time.sleep(0.05)


@pytest.mark.parametrize("which", ["api", "database"])
def test_svc_serve_refuses_to_forward_the_api_or_database_port(tmp_path: Path,
                                                              which: str) -> None:
    api_port, db_port = free_port(), free_port()
    env = {"PATH": os.environ.get("PATH", ""), "SVC_DATA_DIR": str(tmp_path / "data"),
           "SVC_PORT": str(api_port), "SVC_LOCAL_SANDBOX": "off",
           "SVC_DATABASE_URL": f"postgresql://svc@127.0.0.1:{db_port}/svc",
           "SVC_BACKEND_LOOPBACK_PORTS": f"11434,{api_port if which == 'api' else db_port}"}
    done = subprocess.run([svc_executable(), "serve"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    said = done.stdout + done.stderr
    assert "SVC_BACKEND_LOOPBACK_PORTS may not forward port" in said
    assert ("SVC_PORT" if which == "api" else "SVC_DATABASE_URL") in said


def test_loopback_ports_setting_is_checked() -> None:
    from api.variables import ports

    assert ports("SVC_BACKEND_LOOPBACK_PORTS", "11434, 8000,11434") == (11434, 8000)
    for bad in ("0", "65536", "http", "-1"):
        with pytest.raises(ValueError, match="SVC_BACKEND_LOOPBACK_PORTS"):
            ports("SVC_BACKEND_LOOPBACK_PORTS", bad)
    assert network.url_port("postgresql://u@/db?host=/tmp/pg", 5432) is None
    assert network.url_port("postgresql://u@127.0.0.1/db", 5432) == 5432
    assert network.url_port("http://127.0.0.1:8123", 80) == 8123
