"""Tenant scoping (DESIGN 12, issue 25 items 5-6) through the real app on real Postgres: a
key of tenant B gets 404 -- the very answer of an absent id -- on every read and act of tenant
A's resources, 403 on a body naming A, lists/stats/commander/sessions of its own tenant only
(filtered in SQL: ``limit`` still fills with B's items), a cache that never crosses tenants,
runner tokens bound to their own job and session; refused calls change nothing."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from api import examples
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import replay_report, snapshot, task_body
from tests.test_auth import app_routes, bearer, example_of, new_key
from tests.test_dispatch import run_task
from tests.test_runner_protocol import protocol_on

TASKS = "/api/v1/queue/tasks"
SESSIONS = "/api/v1/sessions"
A, B = "alpha", "beta"
ID_PARAMS = ("task_id", "run_id", "session_id", "attempt_id")


async def resources_of_a(client: httpx.AsyncClient) -> dict[str, str]:
    """A dispatched and settled task of tenant A in a session of its own: every id."""
    task_id, task = await run_task(client, "hello", tenantId=A,
                                   sessionRef={"sessionId": "ses_alpha_1",
                                               "conversationId": "conv_alpha"})
    assert task["state"] == "completed", task
    latest = task["latestAttempt"]
    return {"task_id": task_id, "attempt_id": latest["attemptId"], "run_id": latest["runId"],
            "session_id": latest["sessionId"]}


def absent_ids() -> dict[str, str]:
    return {"task_id": "tsk_absent", "attempt_id": "att_absent", "run_id": "run_absent",
            "session_id": "ses_absent"}


def filled(path: str, ids: dict[str, str]) -> str:
    for name, value in ids.items():
        path = path.replace("{" + name + "}", value)
    return path


def normalised(answer: httpx.Response, ids: dict[str, str]) -> tuple[int, str]:
    """The answer with the ids it was asked about replaced by their names."""
    text = answer.text
    for name, value in ids.items():
        text = text.replace(value, f"<{name}>")
    return answer.status_code, text


def scoped_routes() -> list[tuple[str, str, Any]]:
    """Every route naming a task, attempt, run or session (the runner protocol aside: its
    own job's token is its only credential)."""
    return [(method, path, handler) for method, path, handler in app_routes()
            if any("{" + name + "}" in path for name in ID_PARAMS)
            and not path.startswith("/api/v1/runner/")]


async def test_another_tenant_gets_404_as_if_absent_on_every_read_and_act(
        client: httpx.AsyncClient, database_url: str) -> None:
    ids = await resources_of_a(client)
    key_b, _ = await new_key(client, "operator", "judge", tenant=B)
    key_a, _ = await new_key(client, "operator", "judge", tenant=A)
    before = await snapshot(database_url)
    routes = scoped_routes()
    assert len(routes) == 17, [f"{m} {p}" for m, p, _ in routes]  # 8 task, 3 run, 6 session
    for method, path, handler in routes:
        for query in ("", "?dryRun=true") if method == "POST" else ("",):
            body = example_of(handler) if method == "POST" else None
            hidden = await client.request(method, filled(path, ids) + query, json=body,
                                          headers=bearer(key_b))
            absent = await client.request(method, filled(path, absent_ids()) + query,
                                          json=body, headers=bearer(key_b))
            where = (method, path, query, hidden.text)
            assert hidden.status_code == 404, where
            assert hidden.json()["error"]["code"] == "not-found", where
            assert normalised(hidden, ids) == normalised(absent, absent_ids()), where
    assert await snapshot(database_url) == before, "a refused call changes nothing"
    for path in ("/api/v1/queue/tasks/{task_id}", "/api/v1/queue/tasks/{task_id}/attempts",
                 "/api/v1/runs/{run_id}/runner-job", "/api/v1/sessions/{session_id}",
                 "/api/v1/sessions/{session_id}/output", "/api/v1/sessions/{session_id}/trace"):
        own = await client.get(filled(path, ids), headers=bearer(key_a))
        assert own.status_code == 200, (path, own.text)
        assert (await client.get(filled(path, ids))).status_code == 200, "admin sees all"


async def test_a_body_naming_another_tenant_or_project_is_403(
        client: httpx.AsyncClient, database_url: str) -> None:
    key_b, _ = await new_key(client, "submitter", tenant=B)
    scoped, _ = await new_key(client, "submitter", tenant=B, projects=["web"])
    before = await snapshot(database_url)
    for query in ("", "?dryRun=true"):
        refused = await client.post(TASKS + query, json=task_body(tenantId=A),
                                    headers=bearer(key_b))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "tenant-mismatch"
        items = [{"idempotencyKey": "k0", "task": task_body(tenantId=B)},
                 {"idempotencyKey": "k1", "task": task_body(tenantId=A)}]
        batch = await client.post(f"{TASKS}/batch{query}", json={"items": items},
                                  headers=bearer(key_b))
        assert batch.status_code == 403, batch.text
        assert batch.json()["error"]["code"] == "tenant-mismatch"
        assert batch.json()["error"]["details"]["index"] == 1
        project = await client.post(TASKS + query, json=task_body(tenantId=B, projectId="api"),
                                    headers=bearer(scoped))
        assert project.status_code == 403, project.text
        assert project.json()["error"]["code"] == "project-mismatch"
    assert await snapshot(database_url) == before
    own = await client.post(TASKS, json=task_body(tenantId=B, projectId="web"),
                            headers=bearer(scoped))
    assert own.status_code == 201, own.text
    assert (await client.post(TASKS, json=task_body(tenantId=A))).status_code == 201, \
        "an admin of every tenant acts for any"


async def submit_as(client: httpx.AsyncClient, key: str, tenant: str, count: int,
                    **extra: Any) -> list[str]:
    ids = []
    for n in range(count):
        answer = await client.post(TASKS, json=task_body(tenantId=tenant, title=f"t{n}",
                                                         **extra), headers=bearer(key))
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["taskId"])
    return ids


async def test_lists_stats_commander_and_sessions_hold_the_callers_tenant_only(
        client: httpx.AsyncClient, database_url: str) -> None:
    key_a, _ = await new_key(client, "operator", tenant=A)
    key_b, _ = await new_key(client, "operator", tenant=B)
    mine = await submit_as(client, key_b, B, 3)
    theirs = await submit_as(client, key_a, A, 8)  # newer than all of B's
    session_b = (await client.post(SESSIONS, json={}, headers=bearer(key_b))).json()
    session_a = (await client.post(SESSIONS, json={}, headers=bearer(key_a))).json()
    # A reads first at this head, so a cache keyed without the tenant would hand B A's pages.
    for key in (key_a, key_b):
        for path in (f"{TASKS}?limit=2", "/api/v1/queue/stats", "/api/v1/queue/commander",
                     f"{SESSIONS}?state=all"):
            assert (await client.get(path, headers=bearer(key))).status_code == 200
    seen: list[str] = []
    cursor: str | None = None
    while True:
        page = (await client.get(TASKS, params={"limit": 2, **({"cursor": cursor} if cursor
                                                               else {})},
                                 headers=bearer(key_b))).json()
        assert len(page["items"]) == 2 or page["nextCursor"] is None, page
        seen += [item["taskId"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == mine[::-1], "newest first, up to limit of B's own, cursors keep working"
    polled = (await client.get(TASKS, params={"updatedAfter": 0},
                               headers=bearer(key_b))).json()
    assert [item["taskId"] for item in polled["items"]] == mine
    stats = (await client.get("/api/v1/queue/stats", headers=bearer(key_b))).json()
    assert stats["total"] == 3 and sum(stats["byState"].values()) == 3, stats
    commander = (await client.get("/api/v1/queue/commander", headers=bearer(key_b))).json()
    assert {item["taskId"] for item in commander["items"]} == set(mine)
    sessions = (await client.get(SESSIONS, params={"state": "all"},
                                 headers=bearer(key_b))).json()
    assert [s["sessionId"] for s in sessions["items"]] == [session_b["sessionId"]]
    everything = (await client.get(TASKS, params={"limit": 500})).json()
    assert set(mine + theirs) <= {item["taskId"] for item in everything["items"]}
    admin_stats = (await client.get("/api/v1/queue/stats")).json()
    assert admin_stats["total"] == 11
    all_sessions = (await client.get(SESSIONS, params={"state": "all"})).json()
    assert {session_a["sessionId"], session_b["sessionId"]} <= {
        s["sessionId"] for s in all_sessions["items"]}
    assert (await replay_report(database_url)).ok, "replay equals live with two tenants"
    conn = await asyncpg.connect(database_url)
    try:
        tenants = dict(await conn.fetch("SELECT session_id, tenant_id FROM session_summary"))
    finally:
        await conn.close()
    assert tenants[session_b["sessionId"]] == B and tenants[session_a["sessionId"]] == A


async def test_a_project_scoped_key_lists_its_projects_only(client: httpx.AsyncClient) -> None:
    web, _ = await new_key(client, "submitter", tenant=B, projects=["web"])
    key_b, _ = await new_key(client, "submitter", tenant=B)
    other = await submit_as(client, key_b, B, 2, projectId="api")
    own = await submit_as(client, web, B, 1, projectId="web")
    listed = (await client.get(TASKS, headers=bearer(web))).json()
    assert [item["taskId"] for item in listed["items"]] == own
    stats = (await client.get("/api/v1/queue/stats", headers=bearer(web))).json()
    assert stats["total"] == 1
    assert (await client.get(f"{TASKS}/{other[0]}", headers=bearer(web))).status_code == 404


async def test_a_reader_of_a_tenant_cannot_dispatch_its_own_task(
        client: httpx.AsyncClient, database_url: str) -> None:
    reader, _ = await new_key(client, "reader", tenant=B)
    task_id = (await client.post(TASKS, json=task_body(tenantId=B))).json()["taskId"]
    assert (await client.get(f"{TASKS}/{task_id}", headers=bearer(reader))).status_code == 200
    before = await snapshot(database_url)
    refused = await client.post(f"{TASKS}/{task_id}/dispatch", json={},
                                headers=bearer(reader))
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert await snapshot(database_url) == before


async def test_the_session_cap_counts_the_callers_tenant(
        app_url: str, runner_settings: RunnerSettings) -> None:
    capped = dataclasses.replace(runner_settings, max_sessions_per_tenant=1)
    async with app_client(app_url, capped) as client:
        key_a, _ = await new_key(client, "operator", tenant=A)
        key_b, _ = await new_key(client, "operator", tenant=B)
        assert (await client.post(SESSIONS, json={}, headers=bearer(key_b))).status_code == 201
        full = await client.post(SESSIONS, json={}, headers=bearer(key_b))
        assert full.status_code == 429 and full.json()["error"]["details"]["tenantId"] == B
        assert (await client.post(SESSIONS, json={}, headers=bearer(key_a))).status_code == 201


async def test_runner_tokens_speak_for_their_own_job_and_session_only(
        client: httpx.AsyncClient, database_url: str, tmp_path: Path) -> None:
    key_a, _ = await new_key(client, "operator", tenant=A)
    key_b, _ = await new_key(client, "operator", tenant=B)
    first = (await client.post(SESSIONS, json={}, headers=bearer(key_a))).json()["sessionId"]
    second = (await client.post(SESSIONS, json={}, headers=bearer(key_b))).json()["sessionId"]
    async with protocol_on(database_url, tmp_path) as protocol:
        token_a = await protocol.issue("job_a", session_id=first, run_id="run_a")
        await protocol.issue("job_b", session_id=second, run_id="run_b")
    before = await snapshot(database_url)
    runner_routes = [(path, handler) for method, path, handler in app_routes()
                     if path.startswith("/api/v1/runner/")]
    assert len(runner_routes) == 6
    for path, handler in runner_routes:  # job A's token on job B's routes
        refused = await client.post(path.replace("{runner_job_id}", "job_b"),
                                    json=example_of(handler), headers=bearer(token_a))
        assert refused.status_code == 401, (path, refused.text)
        assert refused.json()["error"]["code"] == "unauthorized"
    summary = examples.STORAGE
    other = await client.post(f"{SESSIONS}/{second}/storage/refresh", json=summary,
                              headers=bearer(token_a))
    assert other.status_code == 401, other.text
    by_b = await client.post(f"{SESSIONS}/{first}/storage/refresh", json=summary,
                             headers=bearer(key_b))
    assert by_b.status_code == 404, "an operator of another tenant: as if absent"
    assert await snapshot(database_url) == before
    own = await client.post(f"{SESSIONS}/{first}/storage/refresh", json=summary,
                            headers=bearer(token_a))
    assert own.status_code == 200, own.text
    by_a = await client.post(f"{SESSIONS}/{first}/storage/refresh", json=summary,
                             headers=bearer(key_a))
    assert by_a.status_code == 200, by_a.text
