"""A pod's backend and the network (issue 26 item 4, DESIGN 13), under the test kubelet: the
backend runs in a network namespace with only a loopback, so its connections to the
manager's API port and to the database port are refused; its one way out is its runner's
egress proxy (``HTTPS_PROXY``), which reaches an allow-listed server (the stand-in for the
model API, ``SVC_FETCH_ALLOW_HOSTS``) and refuses the manager and the database. The proxy's
rules and request handling are tested on their own below."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api.settings import ServiceSettings
from runner_assembly.contract.jobfile import FetchAllow
from runner_assembly.runner import egress
from runner_assembly.runner.egress import EgressPolicy, EgressProxy, Refused
from runner_assembly.settings import RunnerSettings
from tests.test_backend_network import database_on_tcp, tcp_service
from tests.test_dispatch import dispatch, settle, submit
from tests.test_driver_conformance import lines, ref, running
from tests.test_k8s_dispatch import kube  # noqa: F401  (the emulator fixture)

MODEL_ANSWER = b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nmodel-api\n"
PROBE = '''\
import json, os, socket, sys, urllib.parse
targets = json.loads(sys.stdin.read())
proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY") or "http://127.0.0.1:9")
print("probe proxy-variable", os.environ.get("HTTPS_PROXY"), repr(os.environ.get("NO_PROXY")))
def direct(host, port):
    socket.create_connection((host, port), timeout=10).close()
    return "reached"
def tunnel(host, port):
    with socket.create_connection((proxy.hostname, proxy.port), timeout=10) as conn:
        ask = f"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n"
        conn.sendall(ask.encode())
        said = b""
        while chunk := conn.recv(4096):
            said += chunk
    status = said.split(b"\\r\\n", 1)[0].decode()
    return status + (" model-api" if b"model-api" in said else "")
for label, (host, port) in sorted(targets.items()):
    for how, attempt in (("direct", direct), ("proxy", tunnel)):
        try:
            print(f"probe {label}-{how} {attempt(host, port)}")
        except OSError as error:
            print(f"probe {label}-{how} {type(error).__name__}")
'''


@pytest.mark.parametrize("allowed", ["model-port", "all-loopback"])
async def test_a_pod_backend_reaches_the_model_api_through_its_runner_never_the_manager(
    database_url: str, runner_settings: RunnerSettings, tmp_path: Path, kube: Any,  # noqa: F811
    allowed: str
) -> None:
    """``model-port``: the operator allow-lists the model server's ``host:port``; the
    manager and the database are loopback, refused. ``all-loopback``: the operator
    allow-lists every port of ``127.0.0.1``; the manager's and the database's endpoints
    stay refused all the same (the job file's ``protected``)."""
    async with tcp_service("127.0.0.1", MODEL_ANSWER) as model, \
            database_on_tcp(database_url) as db_port:
        settings = dataclasses.replace(
            runner_settings, protected_endpoints=(f"127.0.0.1:{db_port}",),
            fetch_allow_hosts=(f"127.0.0.1:{model}" if allowed == "model-port" else "127.0.0.1",),
            backend_commands={**runner_settings.backend_commands,
                              "profile-1": (sys.executable, "-c", PROBE)},
            backend_kinds={**runner_settings.backend_kinds, "profile-1": "command"})
        async with running("kubernetes", database_url, settings, tmp_path, kube) as harness:
            client = harness.client
            targets = {"api": ("127.0.0.1", client.base_url.port),
                       "database": ("127.0.0.1", db_port), "model": ("127.0.0.1", model)}
            task_id = await submit(client, json.dumps(targets), sessionRef=ref("ses_net"))
            await dispatch(client, task_id)
            done = await settle(client, task_id, timeout=90)
            output = await lines(client, "ses_net")
            trace = await lines(client, "ses_net", "trace")
    assert done["state"] == "completed", done["latestAttempt"]
    seen = dict(line.split(" ", 2)[1:] for line in output if line.startswith("probe "))
    for target in ("api", "database", "model"):  # a namespace with only a loopback
        assert seen[f"{target}-direct"] == "ConnectionRefusedError", seen
    assert seen["proxy-variable"] == "http://127.0.0.1:3128 ''", seen
    assert seen["model-proxy"] == "HTTP/1.1 200 Connection established model-api", seen
    assert seen["api-proxy"] == "HTTP/1.1 403 Forbidden", seen
    assert seen["database-proxy"] == "HTTP/1.1 403 Forbidden", seen
    refusals = [json.loads(line) for line in trace if '"egress-refused"' in line]
    assert {(r["host"], r["port"]) for r in refusals} == {
        ("127.0.0.1", targets["api"][1]), ("127.0.0.1", db_port)}, refusals
    assert any('"backend-start"' in line and '"sandbox": "bwrap"' in line for line in trace)


@contextlib.contextmanager
def proxy(tmp_path: Path, policy: EgressPolicy) -> Iterator[Path]:
    """An egress proxy with ``policy`` on a socket in ``tmp_path``; the socket's path."""
    served = EgressProxy(tmp_path / "proxy.sock", policy)
    try:
        yield served.path
    finally:
        served.close()
    assert not served.path.exists()


def ask(path: Path, request: bytes) -> bytes:
    """Send ``request`` to the proxy at ``path``; everything it answers until it closes."""
    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(30)
        conn.connect(str(path))
        conn.sendall(request)
        said = b""
        while chunk := conn.recv(4096):
            said += chunk
    return said


@contextlib.contextmanager
def echo_server() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that answers each connection with what it received first (one
    request head); its port and the heads it got."""
    heads: list[bytes] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    head = b""
                    while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                        head += chunk
                    heads.append(head)
                    conn.sendall(b"HTTP/1.0 200 OK\r\n\r\nseen")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield int(listener.getsockname()[1]), heads
    finally:
        listener.close()


def test_the_proxy_forwards_plain_http_one_request_per_connection(tmp_path: Path) -> None:
    with echo_server() as (port, heads), \
            proxy(tmp_path, EgressPolicy(FetchAllow(hosts=[f"127.0.0.1:{port}"]))) as path:
        said = ask(path, f"GET http://127.0.0.1:{port}/v1/models?x=1 HTTP/1.1\r\n"
                         f"Host: 127.0.0.1:{port}\r\nProxy-Authorization: Basic eA==\r\n"
                         "Connection: keep-alive\r\nAccept: */*\r\n\r\n".encode())
    assert said == b"HTTP/1.0 200 OK\r\n\r\nseen"
    (head,) = heads
    assert head.split(b"\r\n")[0] == b"GET /v1/models?x=1 HTTP/1.1"
    assert b"Proxy-Authorization" not in head and b"keep-alive" not in head
    assert b"Connection: close" in head and b"Accept: */*" in head


@pytest.mark.parametrize("request_line", [
    b"GET https://example.com/ HTTP/1.1", b"GET /relative HTTP/1.1",
    b"CONNECT example.com HTTP/1.1", b"\xff\xfe", b"CONNECT a:b:c HTTP/1.1"])
def test_the_proxy_answers_anything_else_400(tmp_path: Path, request_line: bytes) -> None:
    with proxy(tmp_path, EgressPolicy(FetchAllow())) as path:
        said = ask(path, request_line + b"\r\nHost: x\r\n\r\n")
    assert said.startswith(b"HTTP/1.1 400 Bad Request\r\n"), said


def test_a_public_address_is_reached_without_an_allow_list() -> None:
    assert [str(a) for a in EgressPolicy(FetchAllow()).addresses("93.184.216.34", 443)] == [
        "93.184.216.34"]
    assert EgressPolicy(FetchAllow()).addresses("2606:2800:220:1::", 443)


def test_the_manager_is_refused_even_when_its_host_is_allow_listed() -> None:
    """``SVC_FETCH_ALLOW_HOSTS=127.0.0.1`` (any port) opens loopback to the proxy, but never
    the manager's own endpoint, by address or by name."""
    policy = EgressPolicy(FetchAllow(hosts=["127.0.0.1", "localhost"]),
                          protected=(("127.0.0.1", 8080),))
    assert [str(a) for a in policy.addresses("127.0.0.1", 11434)] == ["127.0.0.1"]
    for host in ("127.0.0.1", "localhost", "127.1", "0x7f000001"):
        with pytest.raises(Refused, match="service's own endpoint"):
            policy.addresses(host, 8080)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "169.254.169.254",
                                  "metadata.google.internal", "[::1]", "0.0.0.0", "2130706433",
                                  "[::ffff:127.0.0.1]", "10.96.0.1", "192.168.1.20",
                                  "172.16.0.5", "100.64.0.1", "[fd00::1]",
                                  "[::ffff:10.0.0.1]"])
def test_addresses_that_are_not_public_are_refused_unless_allow_listed(host: str) -> None:
    """Loopback, link-local and metadata as for fetches, and for a backend every other
    address that is not global too: the cluster's pods and services (the manager's pods
    behind its Service, the Kubernetes API) are no model API."""
    name = host.strip("[]")
    with pytest.raises(Refused, match="not public"):
        EgressPolicy(FetchAllow()).addresses(name, 443)
    if name != "metadata.google.internal":  # (no such name here to resolve)
        assert EgressPolicy(FetchAllow(hosts=[f"{host}:443"])).addresses(name, 443)


def test_the_service_endpoints_come_from_its_urls(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The database's TCP endpoints (``SVC_DATABASE_URL``, ``SVC_MIGRATE_DATABASE_URL``) and
    the manager's (``SVC_RUNNER_API_URL``) reach the job file as ``protected``; a database
    on a Unix socket has none."""
    assert egress.endpoint("http://127.0.0.1:8123/api") == ("127.0.0.1", 8123)
    assert egress.endpoint("https://Svc.Example.") == ("svc.example", 443)
    assert egress.endpoint("postgresql://u@[::1]/db") == ("::1", 5432)
    assert egress.endpoint(None) is None and egress.endpoint("unix:/x") is None
    assert egress.endpoint("postgresql://u@localhost/db?host=/run/pg") is None
    monkeypatch.setenv("SVC_DATABASE_URL", "postgresql://svc@db.example:6543/svc")
    monkeypatch.setenv("SVC_MIGRATE_DATABASE_URL", "postgresql://owner@/svc?host=/run/pg")
    settings = ServiceSettings.from_env().runner(tmp_path / "data")
    assert settings.protected_endpoints == ("db.example:6543",)
    allow = dataclasses.replace(settings, protected_endpoints=(
        *settings.protected_endpoints, "[::1]:5432")).fetch_allow
    assert allow.protected == ["db.example:6543", "[::1]:5432"]
    policy = egress.policy_for(allow, "http://manager.example:8080")
    assert policy.protected == (("db.example", 6543), ("::1", 5432), ("manager.example", 8080))
