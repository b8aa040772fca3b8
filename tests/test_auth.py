"""Who may do what (DESIGN 12), through the real app: every route but the open ones wants a
credential, each route's role decides, API keys are issued and revoked through the ledger,
shown once and never logged, runner tokens and API keys stay on their own routes, every
ledger entry names its principal, and the first ``svc serve`` writes the first admin key."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from litestar.routes import HTTPRoute

from api.access import is_open, runner_access
from api.app import create_app
from api.auth import undeclared_routes
from api.auth_bootstrap import ensure_admin_key
from api.auth_keys import KeySpec, issue_command
from api.openapi import BODY_KEY, Body
from api.settings import ServiceSettings
from ledger.database import create_pool
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from tests.conftest import running_api, svc_executable
from tests.support import anonymous, replay_report, snapshot, stored_outputs, task_body
from tests.test_runner_protocol import protocol_on

KEYS = "/api/v1/auth/keys"
TASKS = "/api/v1/queue/tasks"
OPEN_PATHS = ("/api/v1/live", "/api/v1/health", "/api/v1/ready", "/metrics", "/api/v1/schema",
              "/api/v1/schema/openapi.json", "/api/v1/schema/swagger")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def app_routes() -> list[tuple[str, str, Any]]:
    """Every (method, path, handler) of the app (built for its routes only), OPTIONS aside."""
    app = create_app("postgresql://unused/none", settings=ServiceSettings.from_env().runner(
        Path(tempfile.gettempdir())))
    found = []
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            for handler in route.route_handlers:
                found += [(method, route.path_format, handler)
                          for method in sorted(handler.http_methods) if method != "OPTIONS"]
    return found


def concrete(path: str) -> str:
    """A path whose ids name nothing."""
    for name in ("task_id", "run_id", "session_id", "attempt_id", "runner_job_id", "key_id"):
        path = path.replace("{" + name + "}", "x_none")
    return path.replace("{name}", "swagger-ui.css")


def example_of(handler: Any) -> Any:
    spec = handler.opt.get(BODY_KEY)
    return spec.example if isinstance(spec, Body) else {}


async def new_key(client: httpx.AsyncClient, *roles: str, tenant: str = "acme",
                  **extra: Any) -> tuple[str, str]:
    """A key with these roles, created by the test admin: (key, key id)."""
    answer = await client.post(KEYS, json={"tenant": tenant, "roles": list(roles), **extra})
    assert answer.status_code == 201, answer.text
    return answer.json()["key"], answer.json()["keyId"]


def test_every_write_declares_its_role() -> None:
    app = create_app("postgresql://unused/none", settings=ServiceSettings.from_env().runner(
        Path(tempfile.gettempdir())))
    assert undeclared_routes(app) == []


async def test_anonymous_callers_get_401_everywhere_but_the_open_routes(
        client: httpx.AsyncClient, database_url: str) -> None:
    before = await snapshot(database_url)
    checked = 0
    with anonymous():
        for method, path, handler in app_routes():
            url = concrete(path)
            answer = await client.request(method, url, json=example_of(handler)
                                          if method == "POST" else None)
            if is_open(handler) or url.startswith("/api/v1/schema"):
                assert answer.status_code != 401, (method, path, answer.text)
                continue
            checked += 1
            assert answer.status_code == 401, (method, path, answer.text)
            assert answer.headers["www-authenticate"] == "Bearer", (method, path)
            code = "unauthorized" if runner_access(handler) == "only" else "unauthenticated"
            assert answer.json()["error"]["code"] == code, (method, path, answer.text)
        for path in OPEN_PATHS:
            assert (await client.get(path)).status_code == 200, path
        for credential in ("svck_" + "A" * 32, "Basic abc", "not-a-key"):
            refused = await client.get(TASKS, headers={"Authorization": credential})
            assert refused.status_code == 401 and refused.json()["error"]["code"] == \
                "unauthenticated"
    assert checked >= 25
    assert await snapshot(database_url) == before, "a refused caller changes nothing"


async def test_a_reader_reads_but_cannot_submit_or_dispatch(
        client: httpx.AsyncClient, database_url: str) -> None:
    task_id = (await client.post(TASKS, json=task_body())).json()["taskId"]
    reader, _ = await new_key(client, "reader")
    assert (await client.get(f"{TASKS}/{task_id}", headers=bearer(reader))).status_code == 200
    assert (await client.get(TASKS, headers=bearer(reader))).status_code == 200
    before = await snapshot(database_url)
    for url, body in ((f"{TASKS}/{task_id}/dispatch", {}), (TASKS, task_body()),
                      (f"{TASKS}/{task_id}/cancel", {}), (KEYS, {"tenant": "acme",
                                                             "roles": ["admin"]})):
        refused = await client.post(url, json=body, headers=bearer(reader))
        assert refused.status_code == 403, (url, refused.text)
        assert refused.json()["error"]["code"] == "forbidden"
    assert (await client.get(KEYS, headers=bearer(reader))).status_code == 403
    assert await snapshot(database_url) == before


async def test_a_submitter_submits_and_marks_read_but_cannot_dispatch(
        client: httpx.AsyncClient) -> None:
    submitter, _ = await new_key(client, "submitter")
    submitted = await client.post(TASKS, json=task_body(), headers=bearer(submitter))
    assert submitted.status_code == 201, submitted.text
    task_id = submitted.json()["taskId"]
    read = await client.post(f"{TASKS}/{task_id}/read", json={"readerId": "me"},
                             headers=bearer(submitter))
    assert read.status_code == 200, read.text
    for action in ("dispatch", "cancel", "refresh"):
        refused = await client.post(f"{TASKS}/{task_id}/{action}", json={},
                                    headers=bearer(submitter))
        assert refused.status_code == 403, (action, refused.text)
    judge, _ = await new_key(client, "judge")
    assert (await client.post(f"{TASKS}/{task_id}/dispatch", json={},
                              headers=bearer(judge))).status_code == 403


async def _issue_expired_key(url: str) -> str:
    """A key whose hour ran out an hour ago, issued through the ledger."""
    key, command = issue_command(KeySpec("acme", ("admin",), expires_in_s=3600),
                                 datetime.now(UTC) - timedelta(hours=2))
    pool = await create_pool(url, max_size=2)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        await writer.execute(command, "test")
    finally:
        await writer.close()
        await pool.close()
    return key


async def test_revoked_and_expired_keys_are_refused(client: httpx.AsyncClient,
                                                    database_url: str) -> None:
    key, key_id = await new_key(client, "operator", expiresInSeconds=3600)
    assert (await client.get(TASKS, headers=bearer(key))).status_code == 200
    revoked = await client.post(f"{KEYS}/{key_id}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revokedAt"], revoked.text
    again = await client.post(f"{KEYS}/{key_id}/revoke")
    assert again.json()["revokedAt"] == revoked.json()["revokedAt"], "revoked once"
    refused = await client.get(TASKS, headers=bearer(key))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    assert refused.headers["www-authenticate"] == "Bearer"
    expired = await _issue_expired_key(database_url)
    assert (await client.get(TASKS, headers=bearer(expired))).status_code == 401
    assert (await client.post(f"{KEYS}/key_none/revoke")).status_code == 404
    assert (await replay_report(database_url)).ok, "the key stream replays"


@pytest.mark.parametrize("body", [
    {"tenant": "acme", "roles": []}, {"tenant": "acme", "roles": ["root"]},
    {"tenant": "a b", "roles": ["reader"]}, {"roles": ["reader"]},
    {"tenant": "acme", "roles": ["reader"], "expiresInSeconds": 1},
    {"tenant": "acme", "roles": ["reader"], "projects": ["../x"]},
    {"tenant": "acme", "roles": ["reader"], "key": "svck_" + "B" * 32},
])
async def test_a_bad_key_request_writes_nothing(client: httpx.AsyncClient, database_url: str,
                                                body: dict[str, Any]) -> None:
    before = await snapshot(database_url)
    refused = await client.post(KEYS, json=body)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid-request"
    assert await snapshot(database_url) == before


async def test_runner_tokens_and_api_keys_stay_on_their_own_routes(
        client: httpx.AsyncClient, database_url: str, tmp_path: Path) -> None:
    session_id = (await client.post("/api/v1/sessions", json={})).json()["sessionId"]
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_t", session_id=session_id, run_id="run_t")
    for method, url in (("GET", TASKS), ("POST", TASKS), ("GET", KEYS),
                        ("POST", "/api/v1/runs/run_t/runner-job"),
                        ("GET", f"/api/v1/sessions/{session_id}")):
        refused = await client.request(method, url, json=task_body() if method == "POST"
                                       else None, headers=bearer(token))
        assert refused.status_code == 401, (method, url, refused.text)
        assert refused.json()["error"]["code"] == "unauthenticated"
    operator, key_id = await new_key(client, "operator")
    claim = await client.post("/api/v1/runner/jobs/job_t/claim", json={"claimant": "r"},
                              headers=bearer(operator))
    assert claim.status_code == 401 and claim.json()["error"]["code"] == "unauthorized"
    assert operator not in claim.text
    claimed = await client.post("/api/v1/runner/jobs/job_t/claim", json={"claimant": "r"},
                                headers=bearer(token))
    assert claimed.status_code == 200, "the job's own token still speaks for it"
    with anonymous():
        storage = await client.post(f"/api/v1/sessions/{session_id}/storage/refresh", json={})
    assert storage.status_code == 401, "no anonymous storage summaries"
    before = await snapshot(database_url)
    for stream_id in (session_id, "run_t", key_id):  # streams of other types, not jobs
        for path, body in (("claim", {"claimant": "r"}), ("heartbeat", {}),
                           ("lines", {"channel": "trace", "lines": [], "seq": 1})):
            refused = await client.post(f"/api/v1/runner/jobs/{stream_id}/{path}", json=body,
                                        headers=bearer(token))
            assert refused.status_code == 401, (stream_id, path, refused.text)
    assert await snapshot(database_url) == before


async def test_every_entry_a_request_makes_names_its_principal(
        client: httpx.AsyncClient, database_url: str) -> None:
    operator, key_id = await new_key(client, "operator")
    conn = await asyncpg.connect(database_url)
    try:
        mark = await conn.fetchval("SELECT last_seq FROM ledger_head")
        task_id = (await client.post(TASKS, json=task_body(),
                                     headers=bearer(operator))).json()["taskId"]
        for action, body in (("read", {"readerId": "me"}), ("cancel", {"reason": "no"})):
            done = await client.post(f"{TASKS}/{task_id}/{action}", json=body,
                                     headers=bearer(operator))
            assert done.status_code == 200, done.text
        session = await client.post("/api/v1/sessions", json={}, headers=bearer(operator))
        assert session.status_code == 201, session.text
        await client.post(f"{KEYS}/{key_id}/revoke")  # by the test's own admin key
        rows = await conn.fetch("SELECT stream_id, actor, payload::text AS payload FROM ledger "
                                "WHERE change_seq > $1 ORDER BY change_seq", mark)
    finally:
        await conn.close()
    actors = {row["stream_id"]: row["actor"] for row in rows}
    assert actors[task_id] == key_id and actors[session.json()["sessionId"]] == key_id
    assert actors[key_id] == "admin", "the operator's admin key (SVC_ADMIN_KEY_SHA256)"
    made = [row["actor"] for row in rows if row["stream_id"] != key_id]
    assert len(made) >= 4 and set(made) == {key_id}
    creator = json.loads(rows[0]["payload"])["creator"]
    assert creator == key_id


def svc(*args: str, env: dict[str, str], cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([svc_executable(), *args], capture_output=True, text=True,
                          env={"PATH": os.environ.get("PATH", ""), **env}, cwd=cwd, timeout=60)


async def test_a_key_is_shown_once_and_never_logged(database_url: str,
                                                    tmp_path: Path) -> None:
    async with running_api(database_url, tmp_path, {"SVC_LOG_LEVEL": "DEBUG"}) as base:
        env = {"SVC_API_URL": base, "SVC_TOKEN": os.environ["SVC_TOKEN"]}
        created = svc("auth", "key", "create", "--tenant", "acme", "--role", "operator",
                      "--role", "judge", "--project", "demo", "--expires-in", "30d", env=env)
        assert created.returncode == 0, created.stderr
        key = created.stdout.splitlines()[0]
        assert key.startswith("svck_") and len(key) >= 5 + 22 and " " not in key
        mine = {**env, "SVC_TOKEN": key}
        answers = [svc("queue", "list", "--raw", env=mine).stdout]
        answers.append(svc("queue", "show", "tsk_none", env=mine).stderr)
        answers.append(svc("auth", "key", "list", env=mine).stderr)  # 403: not an admin
        listed = svc("auth", "key", "list", env=env)
        answers += [listed.stdout, svc("auth", "key", "list", "--raw", env=env).stdout]
        assert key[:11] in listed.stdout and "roles judge,operator" in listed.stdout
        async with httpx.AsyncClient(base_url=base) as http:
            leaked = await http.post(TASKS, json=task_body(title=f"my key is {key}"))
            assert leaked.json()["error"]["code"] == "credential-in-request"
            answers.append(leaked.text)
            near = await http.get(TASKS, headers=bearer(key[:-1] + "x"))
            assert near.status_code == 401
            answers.append(near.text)
        key_id = listed.stdout.split()[0]
        revoked = svc("auth", "key", "revoke", key_id, env=env)
        assert revoked.returncode == 0 and "revoked" in revoked.stdout
        answers.append(revoked.stdout)
        assert svc("queue", "list", env=mine).returncode == 1
    outputs, _ = await stored_outputs(database_url, tmp_path)
    assert outputs and any('"route"' in text for text in outputs), "the log was read"
    for text in [*answers, *outputs]:
        assert key not in text and key[5:] not in text


async def test_the_first_serve_writes_one_admin_key_the_cli_uses(database_url: str,
                                                                  tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with running_api(database_url, tmp_path, {"SVC_ADMIN_KEY_SHA256": ""}) as base:
        path = data / "admin.key"
        text = path.read_text()
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert text.endswith("\n") and text.count("\n") == 1 and text.startswith("svck_")
        env = {"SVC_API_URL": base, "SVC_DATA_DIR": str(data)}
        listed = svc("auth", "key", "list", "--raw", env=env)
        assert listed.returncode == 0, listed.stderr
        (only,) = json.loads(listed.stdout)["items"]
        assert (only["tenant"], only["roles"]) == ("*", ["admin"])
        assert svc("queue", "list", env={"SVC_API_URL": base},
                   cwd=tmp_path).returncode == 1, "no key: refused"
        assert svc("queue", "list", env={"SVC_API_URL": base, "SVC_TOKEN": text.strip()}
                   ).returncode == 0
    async with running_api(database_url, tmp_path, {"SVC_ADMIN_KEY_SHA256": ""}):
        assert path.read_text() == text, "a restart keeps the first key"
    others = [tmp_path / f"start-{n}" for n in range(3)]
    for folder in others:
        folder.mkdir()
    written = await asyncio.gather(*(ensure_admin_key(database_url, f) for f in others))
    assert written == [None, None, None], "an admin key exists: none is made"
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE api_key SET revoked_at = now()")  # as if revoked
        written = await asyncio.gather(*(ensure_admin_key(database_url, f) for f in others))
        issued = await conn.fetchval("SELECT count(*) FROM ledger WHERE event_type = "
                                     "'key-issued'")
    finally:
        await conn.close()
    assert sum(p is not None for p in written) == 1, "concurrent starts make one key"
    assert issued == 2


async def test_the_document_names_the_credentials_of_every_operation(
        client: httpx.AsyncClient) -> None:
    with anonymous():
        document = (await client.get("/api/v1/schema/openapi.json")).json()
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "http", "scheme": "bearer"}
    for path, item in document["paths"].items():
        for method, operation in item.items():
            if path in OPEN_PATHS:
                assert "security" not in operation, path
                continue
            assert operation["security"], (method, path)
            assert "401" in operation["responses"], (method, path)
            if not path.startswith("/api/v1/runner/"):
                assert operation["security"][0] == {"apiKey": []}, (method, path)
                assert "403" in operation["responses"], (method, path)
