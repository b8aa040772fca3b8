"""The real ``svc`` program against a real ``svc serve`` process."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.conftest import svc_executable
from tests.support import ADMIN_HEADER_LINE, TEST_ADMIN_KEY, task_body, write_profile_secret


def svc(*args: str, api: str | None = None, stdin: str | None = None,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {"PATH": os.environ.get("PATH", ""), "SVC_TOKEN": TEST_ADMIN_KEY, **(env or {})}
    if api:
        full_env["SVC_API_URL"] = api
    return subprocess.run([svc_executable(), *args], input=stdin, capture_output=True,
                          text=True, env=full_env, timeout=60)


def submit(api: str, **overrides: Any) -> str:
    result = svc("queue", "submit", "--json-stdin", "--raw", api=api,
                 stdin=json.dumps(task_body(**overrides)))
    assert result.returncode == 0, result.stderr
    return str(json.loads(result.stdout)["taskId"])


async def test_submit_show_read_cancel_round_trip(served_api: str) -> None:
    result = svc("queue", "submit", "--json-stdin", api=served_api,
                 stdin=json.dumps(task_body(title="Round trip")))
    assert result.returncode == 0, result.stderr
    task_id = result.stdout.split()[0]
    assert task_id.startswith("tsk_")
    assert "pending" in result.stdout and "Round trip" in result.stdout
    assert "make the tests pass" not in result.stdout, "the prompt is not shown by default"

    shown = svc("queue", "show", task_id, api=served_api)
    assert shown.returncode == 0
    assert "sessionPath: - (not dispatched)" in shown.stdout
    full = svc("queue", "show", task_id, "--full", api=served_api)
    assert "prompt: make the tests pass" in full.stdout

    read = svc("queue", "read", task_id, "--reader-id", "ann", api=served_api)
    assert read.returncode == 0
    commander = svc("queue", "commander", "--reader-id", "ann", api=served_api)
    assert f"{task_id}  pending   read" in commander.stdout
    assert f"next: svc queue dispatch {task_id}" in commander.stdout

    cancelled = svc("queue", "cancel", task_id, "--reason", "not needed", api=served_api)
    assert cancelled.returncode == 0
    assert "cancelled: not needed" in cancelled.stdout
    again = svc("queue", "cancel", task_id, api=served_api)
    assert again.returncode == 1
    assert again.stderr.startswith("error: invalid-transition:")


async def test_submit_from_a_file_and_dry_run(served_api: str, tmp_path: Path) -> None:
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task_body(queue="alpha/fast")))
    dry = svc("queue", "submit", "--json-file", str(path), "--dry-run", api=served_api)
    assert dry.returncode == 0
    assert "dry run: submit (nothing changed)" in dry.stdout
    assert "(0 tasks" in svc("queue", "list", api=served_api).stdout
    real = svc("queue", "submit", "--json-file", str(path), api=served_api)
    assert real.returncode == 0
    assert "alpha/fast" in real.stdout


async def test_raw_prints_the_api_json_unchanged(served_api: str) -> None:
    task_id = submit(served_api)
    api_text = httpx.get(f"{served_api}/api/v1/queue/tasks/{task_id}").text
    assert svc("queue", "show", task_id, "--raw", api=served_api).stdout == api_text + "\n"
    listed = svc("queue", "list", "--raw", "--limit", "5", api=served_api).stdout
    assert json.loads(listed)["items"][0]["taskId"] == task_id


async def test_list_filters_and_stats(served_api: str) -> None:
    first = submit(served_api, queue="alpha", backendProfile="profile-3")
    submit(served_api, queue="beta")
    svc("queue", "cancel", first, api=served_api)
    listed = svc("queue", "list", "--queue", "alpha", "--state", "cancelled", api=served_api)
    assert listed.returncode == 0
    assert first in listed.stdout and "(1 tasks" in listed.stdout
    stats = svc("queue", "stats", api=served_api)
    assert "total: 2" in stats.stdout
    assert "by state: cancelled=1  pending=1" in stats.stdout
    assert "profile-3=1" in stats.stdout
    after = svc("queue", "list", "--updated-after", "2", "--raw", api=served_api)
    assert [i["taskId"] for i in json.loads(after.stdout)["items"]] == [first]


@pytest.mark.parametrize(("args", "stdin", "code", "message"), [
    (("queue", "submit", "--json-stdin"), "{not json", 1, "error: invalid-request:"),
    (("queue", "submit", "--json-stdin"), json.dumps({"title": "x"}), 1,
     "error: invalid-request:"),
    (("queue", "submit"), None, 2, "--json-stdin"),
    (("queue", "submit", "--json-file", "/nonexistent/task.json"), None, 2, "cannot read"),
    (("queue", "show", "tsk_missing"), None, 1, "error: not-found:"),
    (("queue", "list", "--limit", "501"), None, 1, "error: invalid-request:"),
    (("queue", "read", "tsk_missing", "--reader-id", "a b"), None, 1, "invalid-request"),
])
async def test_failures_exit_non_zero_with_the_error_code(
    served_api: str, args: tuple[str, ...], stdin: str | None, code: int, message: str
) -> None:
    result = svc(*args, api=served_api, stdin=stdin)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreachable_api_is_reported() -> None:
    result = svc("queue", "list", api="http://127.0.0.1:9")
    assert result.returncode == 3
    assert result.stderr.startswith("error: infra-failed: cannot reach the API")


@pytest.mark.parametrize("command", [
    ("--help",), ("queue", "--help"), ("queue", "list", "--help"),
    ("queue", "commander", "--help"), ("ledger", "replay", "--help"), ("serve", "--help"),
])
def test_help_teaches_the_options(command: tuple[str, ...]) -> None:
    result = svc(*command)
    assert result.returncode == 0
    assert "Usage: svc" in result.stdout


def test_version() -> None:
    result = svc("--version")
    assert result.returncode == 0 and result.stdout.strip() == "0.1.0"


async def test_ledger_replay_and_db_migrate(served_api: str, database_url: str) -> None:
    task_id = submit(served_api)
    env = {"SVC_DATABASE_URL": database_url}
    assert "schema is up to date" in svc("db", "migrate", env=env).stdout
    verify = svc("ledger", "replay", "--verify", env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "hash chain: ok" in verify.stdout and "task_summary: equal" in verify.stdout
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE task_summary SET state = 'completed' WHERE task_id = $1",
                           task_id)
    finally:
        await conn.close()
    drifted = svc("ledger", "replay", "--verify", env=env)
    assert drifted.returncode == 1
    assert f"task_summary: 2 differing rows (e.g. {task_id})" in drifted.stdout
    repaired = svc("ledger", "replay", env=env)
    assert repaired.returncode == 0
    assert "live projections replaced by the rebuild" in repaired.stdout
    assert svc("ledger", "replay", "--verify", env=env).returncode == 0


async def test_no_secret_reaches_cli_output(served_api: str) -> None:
    canary = "CliCanaryToken9876543210abcdefGHIJ"
    refused = svc("queue", "submit", "--json-stdin", "--full", api=served_api, stdin=json.dumps(
        task_body(payload={"prompt": f"use https://bot:{canary}@git.example.org/r.git"})))
    assert refused.returncode == 1 and "credential-in-request" in refused.stderr  # issue 13
    body = task_body(metadata={"apiKey": canary, "note": f"DB_PASSWORD={canary}"})
    created = svc("queue", "submit", "--json-stdin", "--full", api=served_api,
                  stdin=json.dumps(body))
    assert created.returncode == 0
    outputs = [refused, created]
    task_id = json.loads(svc("queue", "list", "--raw", api=served_api).stdout)["items"][0][
        "taskId"]
    for args in (("queue", "show", task_id, "--full"),
                 ("queue", "list", "--full"), ("queue", "commander", "--full")):
        outputs.append(svc(*args, api=served_api))
    for result in outputs:
        assert canary not in result.stdout + result.stderr
    raw = json.loads(svc("queue", "show", task_id, "--raw", api=served_api).stdout)
    assert raw["contract"]["metadata"] == body["metadata"], "--raw: the API's JSON, as sent"


async def test_the_server_survives_clients_that_hang_up_mid_response(served_api: str) -> None:
    """Clients closing while responses are still being written must not kill the server."""
    import socket
    import struct
    from concurrent.futures import ThreadPoolExecutor
    from urllib.parse import urlsplit

    body = json.dumps(task_body(title="x" * 300)).encode()
    for _ in range(40):
        httpx.post(f"{served_api}/api/v1/queue/tasks", content=body,
                   headers={"content-type": "application/json"})
    address = urlsplit(served_api)
    request = (b"GET /api/v1/queue/tasks?limit=500 HTTP/1.1\r\nHost: x\r\n" + ADMIN_HEADER_LINE
               + b"\r\n") * 200

    def hang_up(index: int) -> None:
        with socket.create_connection((address.hostname, address.port)) as sock:
            if index % 2:  # close with a reset instead of a FIN
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(request)
            sock.recv(65536)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(hang_up, range(40)))
    assert httpx.get(f"{served_api}/api/v1/health").status_code == 200


async def test_the_server_ignores_sigpipe(served_api: str) -> None:
    """A peer that hangs up mid-response must raise EPIPE in the server, never kill it."""
    from tests.conftest import SERVER_PIDS

    status = Path(f"/proc/{SERVER_PIDS[served_api]}/status").read_text()
    ignored = int(next(line for line in status.splitlines() if line.startswith("SigIgn:"))
                  .split()[1], 16)
    sigpipe = 13
    assert ignored & (1 << (sigpipe - 1)), "SIGPIPE would kill the server"


async def test_dispatch_refresh_attempts_and_retry_commands(served_api: str) -> None:
    task_id = submit(served_api, payload={"prompt": "exit: 5"})
    planned = svc("queue", "dispatch", task_id, "--dry-run", api=served_api)
    assert planned.returncode == 0 and "dry run: dispatch (nothing changed)" in planned.stdout
    dispatched = svc("queue", "dispatch", task_id, "--json-stdin", api=served_api,
                     stdin='{"attemptId": "att_cli"}')
    assert dispatched.returncode == 0, dispatched.stderr
    assert "attempt: att_cli #0 running" in dispatched.stdout
    assert "workReady: svc 0.1.0" in dispatched.stdout
    for _ in range(100):
        refreshed = svc("queue", "refresh", task_id, api=served_api)
        if "failed" in refreshed.stdout.splitlines()[0]:
            break
    assert f"next: svc queue retry {task_id} --idempotency-key" in refreshed.stdout
    history = svc("queue", "attempts", task_id, api=served_api)
    assert "#0  att_cli  failed" in history.stdout and "exit=5" in history.stdout
    dry = svc("queue", "retry", task_id, "--idempotency-key", "cli-1", "--reason", "again",
              "--dry-run", api=served_api)
    assert dry.returncode == 0 and "events: task-attempt-reserved" in dry.stdout
    assert "(1 attempts" in svc("queue", "attempts", task_id, api=served_api).stdout
    retried = svc("queue", "retry", task_id, "--idempotency-key", "cli-1", "--reason", "again",
                  api=served_api)
    assert retried.returncode == 0, retried.stderr
    assert "#1  running" in retried.stdout and "key=cli-1" in retried.stdout
    conflict = svc("queue", "retry", task_id, "--idempotency-key", "cli-1", "--reason", "other",
                   api=served_api)
    assert conflict.returncode == 1
    assert conflict.stderr.startswith("error: idempotency-conflict:")
    raw = json.loads(svc("queue", "attempts", task_id, "--raw", api=served_api).stdout)
    assert [a["retryIndex"] for a in raw["items"]] == [0, 1]
    missing = svc("queue", "retry", task_id, "--reason", "x", api=served_api)
    assert missing.returncode != 0 and "idempotency-key" in (missing.stdout + missing.stderr)


@pytest.mark.parametrize(("env", "message"), [
    ({"SVC_RUNNER_DRIVER": "docker"}, "unknown runner driver 'docker'"),
    ({"SVC_RUNTIME_DEFAULTS": "/nonexistent/defaults.json"}, "cannot read SVC_RUNTIME_DEFAULTS"),
    ({"SVC_RUNNER_DRIVER": "kubernetes", "KUBECONFIG": "/nonexistent/kubeconfig"},
     "no Kubernetes configuration"),
])
def test_serve_refuses_a_bad_runner_configuration_clearly(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    result = svc("serve", env={"SVC_DATA_DIR": str(tmp_path), "HOME": str(tmp_path), **env})
    assert result.returncode == 2
    assert result.stderr.startswith("error: invalid-request: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def wait_session(api: str, session_id: str) -> str:
    for _ in range(300):
        shown = svc("sessions", "show", session_id, api=api)
        assert shown.returncode == 0, shown.stderr
        if " running " not in shown.stdout.splitlines()[0]:
            return shown.stdout
        time.sleep(0.1)
    raise AssertionError("the session kept running")


async def test_sessions_send_output_trace_read_cancel(served_api: str, tmp_path: Path) -> None:
    write_profile_secret(tmp_path / "data", "profile-3")
    sent = svc("sessions", "send", "--prompt", "lines: 3", api=served_api)
    assert sent.returncode == 0, sent.stderr
    assert "starts a new thread" in sent.stdout
    session_id = sent.stdout.split("session=")[1].split()[0]
    assert session_id.startswith("ses_")
    wait_session(served_api, session_id)
    output = svc("sessions", "output", session_id, "--all", api=served_api)
    assert output.returncode == 0, output.stderr
    for expected in ("thread started: thr_", "line 1", "line 2", "line 3"):
        assert expected in output.stdout
    resumed = svc("sessions", "send", session_id, "--prompt-stdin", api=served_api,
                  stdin="lines: 2")
    assert resumed.returncode == 0, resumed.stderr
    assert "resumes thr_" in resumed.stdout
    shown = wait_session(served_api, session_id)
    assert "resume thread=thr_" in shown and "storage: volume pvc=svc-v01-session-" in shown
    first_page = svc("sessions", "output", session_id, "--limit", "2", api=served_api)
    assert "--after-seq 2" in first_page.stdout and "(more:" in first_page.stdout
    rest = svc("sessions", "output", session_id, "--after-seq", "2", "--all", api=served_api)
    assert "thread resumed: thr_" in rest.stdout and "reference backend" in rest.stdout
    assert rest.stdout.splitlines()[0] == "> lines: 3", "the page after seq 2 starts at 3"
    trace = svc("sessions", "trace", session_id, api=served_api)
    started = [line for line in trace.stdout.splitlines() if "  backend-start  " in line]
    assert len(started) == 2 and "thread=resume" in started[1], trace.stdout
    assert '"kind"' not in trace.stdout, "trace lines are readable, not raw JSON"

    svc("sessions", "read", session_id, "--reader-id", "ann", api=served_api)
    listed = svc("sessions", "ps", "--reader-id", "ann", api=served_api)
    assert session_id not in listed.stdout
    assert session_id in svc("sessions", "ps", "--reader-id", "bob", api=served_api).stdout
    everything = svc("sessions", "ps", "--state", "all", "--reader-id", "ann", api=served_api)
    assert session_id in everything.stdout

    m3 = svc("sessions", "send", "--profile", "M3", "--prompt", "hi", api=served_api)
    assert m3.returncode == 0, m3.stderr
    m3_session = m3.stdout.split("session=")[1].split()[0]
    by_profile = svc("sessions", "ps", "--state", "all", "--profile", "M3", api=served_api)
    assert m3_session in by_profile.stdout and session_id not in by_profile.stdout

    switch = svc("sessions", "send", session_id, "--profile", "profile-2", "--prompt", "x",
                 api=served_api)
    assert switch.returncode == 2 and "profile switch" in switch.stderr
    idle_cancel = svc("sessions", "cancel", session_id, api=served_api)
    assert idle_cancel.returncode == 1
    assert idle_cancel.stderr.startswith("error: invalid-transition:")
    both = svc("sessions", "send", session_id, "--prompt", "a", "--prompt-stdin",
               api=served_api, stdin="b")
    assert both.returncode == 2
    long = svc("sessions", "send", session_id, "--prompt", "sleep: 20", api=served_api)
    assert long.returncode == 0
    cancelled = svc("sessions", "cancel", session_id, "--reason", "enough", api=served_api)
    assert cancelled.returncode == 0, cancelled.stderr
    assert " cancelled " in cancelled.stdout.splitlines()[0]


async def test_queue_output_ends_with_the_next_session_commands(served_api: str) -> None:
    task_id = submit(served_api, sessionRef={"sessionId": "cli_s", "conversationId": "c"})
    dispatched = svc("queue", "dispatch", task_id, api=served_api)
    assert dispatched.returncode == 0, dispatched.stderr
    assert "next: svc sessions show cli_s | svc sessions output cli_s" in dispatched.stdout
    attempts = svc("queue", "attempts", task_id, api=served_api)
    assert "svc sessions output cli_s" in attempts.stdout
    assert "next: svc sessions ps" in svc("queue", "list", api=served_api).stdout


async def test_submit_sends_an_idempotency_key(served_api: str) -> None:
    """Each invocation has a fresh key (two submits, two tasks); ``--idempotency-key`` makes
    a second submit answer the first task, and another body under it a conflict."""
    assert submit(served_api) != submit(served_api)
    body = json.dumps(task_body(title="Once"))
    first, again = (svc("queue", "submit", "--json-stdin", "--raw", "--idempotency-key",
                        "cli-key-1", api=served_api, stdin=body) for _ in range(2))
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert json.loads(first.stdout)["taskId"] == json.loads(again.stdout)["taskId"]
    other = svc("queue", "submit", "--json-stdin", "--idempotency-key", "cli-key-1",
                api=served_api, stdin=json.dumps(task_body(title="Twice")))
    assert other.returncode == 1
    assert other.stderr.startswith("error: idempotency-conflict:")


def test_submit_retries_once_with_its_key_when_the_commit_is_unknown() -> None:
    """A stand-in API answers 503 commit-unknown first: the CLI sends the same key again."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cli.options import ApiOptions
    from cli.queue_cmd import submit_once_more_if_unknown

    keys: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["content-length"]))
            keys.append(self.headers.get("idempotency-key"))
            unknown = len(keys) == 1
            answer = json.dumps({"error": {"code": "commit-unknown", "message": "m"}}
                                if unknown else {"taskId": "tsk_x"}).encode()
            self.send_response(503 if unknown else 201)
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        api = ApiOptions(f"http://127.0.0.1:{server.server_address[1]}")
        response = submit_once_more_if_unknown(api, b"{}", "k-1", False)
    finally:
        server.shutdown()
        server.server_close()
    assert (response.status, keys) == (201, ["k-1", "k-1"])
