"""The session layer through the real app: threads start and resume from real rollouts in
the session volume, commands on runs, output and trace paging, read cursors, cancel,
storage summaries, evicted sessions, GC and the replacement runner."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from ledger.database import create_pool
from ledger.writer import LedgerWriter
from projections.replay import replay
from projections.store import plan_projection
from runner_assembly.drivers import make_driver
from runner_assembly.orchestration.session_service import SessionService
from runner_assembly.orchestration.wiring import orchestration
from runner_assembly.settings import RunnerSettings
from tests.conftest import running_api
from tests.support import snapshot, task_body, write_profile_secret
from tests.test_dispatch import dispatch, run_task, settle, submit

SESSIONS = "/api/v1/sessions"
TASKS = "/api/v1/queue/tasks"


def ref(session_id: str = "s1") -> dict[str, str]:
    return {"sessionId": session_id, "conversationId": f"conv-{session_id}"}


async def lines(client: Any, session_id: str, channel: str = "output") -> list[str]:
    response = await client.get(f"{SESSIONS}/{session_id}/{channel}?limit=1000")
    assert response.status_code == 200, response.text
    return [item["line"] for item in response.json()["items"]]


async def wait_idle(client: Any, session_id: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        response = await client.get(f"{SESSIONS}/{session_id}")
        assert response.status_code == 200, response.text
        if response.json()["state"] != "running" or time.monotonic() > deadline:
            return dict(response.json())
        await asyncio.sleep(0.1)


async def replay_ok(url: str) -> bool:
    conn = await asyncpg.connect(url)
    try:
        return (await replay(conn)).ok
    finally:
        await conn.close()


@asynccontextmanager
async def own_service(url: str, settings: RunnerSettings) -> AsyncIterator[SessionService]:
    """A session service on this test's event loop (the test client's app runs on another)."""
    pool = await create_pool(url, max_size=4)
    fence = await create_pool(url, max_size=4)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        yield orchestration(pool, fence, writer, make_driver(settings), settings).sessions
    finally:
        await writer.close()
        await pool.close()
        await fence.close()


async def command(client: Any, run_id: str, prompt: str, **extra: Any) -> httpx.Response:
    return await client.post(f"/api/v1/runs/{run_id}/commands",
                             json={"payload": {"prompt": prompt}, **extra})


async def test_two_tasks_in_one_session_resume_the_same_thread(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    first = await submit(client, "first turn", sessionRef=ref())
    await dispatch(client, first)
    assert (await settle(client, first))["state"] == "completed"
    started = [line for line in await lines(client, "s1") if line.startswith("thread ")]
    assert len(started) == 1 and started[0].startswith("thread started: thr_")
    thread = started[0].split(": ")[1]
    second = await submit(client, "second turn", sessionRef=ref())
    await dispatch(client, second)
    assert (await settle(client, second))["state"] == "completed"
    output = await lines(client, "s1")
    assert f"thread resumed: {thread} (turn 2)" in output
    assert output.count("> second turn") == 1 and output.count("> first turn") == 1
    session = (await client.get(f"{SESSIONS}/s1")).json()
    assert session["threadId"] == thread and session["turns"] == 2
    assert [t["resumed"] for t in session["recentTurns"]] == [True, False]
    rollout = runner_settings.sessions_dir / "s1" / f"{thread}.jsonl"
    assert len(rollout.read_text().splitlines()) == 2, "one volume, one rollout, two turns"
    storage = session["storage"]
    assert storage["pvcName"] == "svc-v01-session-s1" and storage["storageFilesCount"] == 1
    assert storage["storageSizeBytes"] == rollout.stat().st_size
    trace = [json.loads(line) for line in await lines(client, "s1", "trace")]
    assert [e["thread"] for e in trace if e["kind"] == "backend-start"] == ["start", "resume"]
    assert await replay_ok(database_url)


async def test_thread_start_prompts_only_on_a_new_thread_and_null_session_never_resumes(
    client: Any, runner_settings: RunnerSettings
) -> None:
    _, done = await run_task(client, "no session")
    session_id = done["latestAttempt"]["sessionId"]
    detail = (await client.get(f"{SESSIONS}/{session_id}")).json()
    assert detail["storageKind"] == "none" and detail["storage"]["pvcName"] is None
    assert [t["resumed"] for t in detail["recentTurns"]] == [False]
    run_id = detail["latestRunId"]
    again = await command(client, run_id, "follow up")
    assert again.status_code == 201, again.text
    assert again.json()["resumed"] is False and again.json()["threadId"] is None
    await wait_idle(client, session_id)
    output = await lines(client, session_id)
    assert sum(line.startswith("thread started:") for line in output) == 2
    assert not any(line.startswith("thread resumed") for line in output)


async def test_a_resume_whose_rollout_is_missing_is_session_store_evicted(
    client: Any, runner_settings: RunnerSettings
) -> None:
    _, done = await run_task(client, "resume", sessionRef={**ref("s2"), "threadId": "thr_gone"})
    assert done["state"] == "blocked"
    assert done["latestAttempt"]["failureKind"] == "session-store-evicted"
    volume = runner_settings.sessions_dir / "s2"
    assert list(volume.iterdir()) == [], "no replacement thread was started"
    detail = (await client.get(f"{SESSIONS}/s2")).json()
    assert detail["threadId"] == "thr_gone" or detail["threadId"] is None
    assert not any(line.startswith("thread started") for line in await lines(client, "s2"))


async def test_payload_thread_id_wins_over_the_session_ref(client: Any) -> None:
    first = await submit(client, "one", sessionRef=ref("s3"))
    await dispatch(client, first)
    await settle(client, first)
    thread = (await client.get(f"{SESSIONS}/s3")).json()["threadId"]
    task = await submit(client, "two", sessionRef={**ref("s3"), "threadId": "thr_other"})
    plan = await client.post(f"{TASKS}/{task}/dispatch", json={"dryRun": True})
    assert plan.json()["plan"]["runnerJob"]["thread"] == {"mode": "resume",
                                                          "threadId": "thr_other"}
    response = await client.post(TASKS, json=task_body(
        payload={"prompt": "three", "threadId": thread},
        sessionRef={**ref("s3"), "threadId": "thr_other"}))
    explicit = response.json()["taskId"]
    await dispatch(client, explicit)
    assert (await settle(client, explicit))["state"] == "completed"
    assert f"thread resumed: {thread} (turn 2)" in await lines(client, "s3")


async def test_a_profile_switch_never_reuses_the_session(
    client: Any, database_url: str
) -> None:
    first = await submit(client, "one", sessionRef=ref("s4"))
    await dispatch(client, first)
    await settle(client, first)
    other = await submit(client, "two", sessionRef=ref("s4"), backendProfile="profile-2")
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{other}/dispatch", json={})
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "invalid-transition"
    assert "profile switch" in response.json()["error"]["message"]
    assert await snapshot(database_url) == before
    created = await client.post(SESSIONS, json={"sessionId": "s4",
                                                "backendProfile": "profile-2"})
    assert created.status_code == 409


async def test_session_api_create_send_resume_and_replay_a_command_id(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    write_profile_secret(runner_settings.data_dir, "profile-3")
    created = await client.post(SESSIONS, json={"backendProfile": "profile-3"})
    assert created.status_code == 201, created.text
    session = created.json()
    session_id, run_id = session["sessionId"], session["runId"]
    assert session["state"] == "idle" and session["storageKind"] == "volume"
    assert (runner_settings.sessions_dir / session_id).is_dir()
    first = await command(client, run_id, "hello", commandId="cmd_first")
    assert first.status_code == 201, first.text
    assert first.json()["resumed"] is False
    replayed = await command(client, run_id, "hello", commandId="cmd_first")
    assert replayed.status_code == 200 and replayed.json()["created"] is False
    assert replayed.json()["runnerJobId"] == first.json()["runnerJobId"]
    busy = await command(client, run_id, "too early")
    assert busy.status_code in (201, 409)  # 409 while the first turn still runs
    idle = await wait_idle(client, session_id)
    if busy.status_code == 201:
        idle = await wait_idle(client, session_id)
    thread = idle["threadId"]
    assert thread and idle["backendProfile"] == "profile-3"
    second = await command(client, run_id, "again")
    assert second.status_code == 201 and second.json()["threadId"] == thread
    await wait_idle(client, session_id)
    assert any(line.startswith(f"thread resumed: {thread}")
               for line in await lines(client, session_id))
    jobs = {p.name for p in runner_settings.jobs_dir.iterdir()}
    assert first.json()["runnerJobId"] in jobs
    assert await replay_ok(database_url)


async def test_evicted_session_short_circuits_commands_and_dispatch(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    session = (await client.post(SESSIONS, json={})).json()
    session_id = session["sessionId"]
    async with own_service(database_url, runner_settings) as service:
        assert await service.gc(datetime.now(UTC)) == []
        evicted = await service.gc(datetime.now(UTC) + timedelta(days=8))
    assert evicted == [session_id]
    assert not (runner_settings.sessions_dir / session_id).exists()
    detail = (await client.get(f"{SESSIONS}/{session_id}")).json()
    assert detail["state"] == "evicted" and detail["storageKind"] == "evicted"
    jobs_before = len(list(runner_settings.jobs_dir.glob("*"))) \
        if runner_settings.jobs_dir.exists() else 0
    before = await snapshot(database_url)
    refused = await command(client, session["runId"], "hello")
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "session-store-evicted"
    task = await submit(client, "in an evicted session", sessionRef={
        "sessionId": session_id, "conversationId": detail["conversationId"]})
    after_submit = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{task}/dispatch", json={})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "session-store-evicted"
    assert await snapshot(database_url) == after_submit
    assert before["session_summary"] == after_submit["session_summary"]
    jobs_after = len(list(runner_settings.jobs_dir.glob("*"))) \
        if runner_settings.jobs_dir.exists() else 0
    assert jobs_after == jobs_before, "no runner job was created"
    assert await replay_ok(database_url)


async def test_gc_keeps_sessions_with_a_running_turn(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    task = await submit(client, "sleep: 20", sessionRef=ref("s5"))
    await dispatch(client, task)
    async with own_service(database_url, runner_settings) as service:
        assert await service.gc(datetime.now(UTC) + timedelta(days=30)) == []
    cancelled = await client.post(f"{SESSIONS}/s5/control", json={"action": "cancel",
                                                                  "reason": "stop"})
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled"
    again = await client.post(f"{SESSIONS}/s5/control", json={"action": "cancel"})
    assert again.status_code == 409
    async with own_service(database_url, runner_settings) as service:
        assert await service.gc(datetime.now(UTC) + timedelta(days=30)) == ["s5"]
    assert not (runner_settings.sessions_dir / "s5").exists()


async def test_list_filters_and_read_cursors(client: Any) -> None:
    idle = (await client.post(SESSIONS, json={"backendProfile": "profile-2"})).json()
    task = await submit(client, "done", sessionRef=ref("s6"))
    await dispatch(client, task)
    await settle(client, task)
    running = await submit(client, "sleep: 20", sessionRef=ref("s7"))
    await dispatch(client, running)

    async def ids(query: str) -> list[str]:
        response = await client.get(f"{SESSIONS}?{query}")
        assert response.status_code == 200, response.text
        return [item["sessionId"] for item in response.json()["items"]]

    assert set(await ids("state=all")) == {idle["sessionId"], "s6", "s7"}
    assert await ids("state=running") == ["s7"]
    assert await ids("state=idle") == [idle["sessionId"]]
    assert await ids("state=terminal") == ["s6"]
    assert await ids("backendProfile=profile-2&state=all") == [idle["sessionId"]]
    assert set(await ids("readerId=me")) == {idle["sessionId"], "s6", "s7"}
    for session_id in (idle["sessionId"], "s6", "s7"):
        read = await client.post(f"{SESSIONS}/{session_id}/read", json={"readerId": "me"})
        assert read.status_code == 200 and read.json()["unread"] is False
    assert await ids("readerId=me") == ["s7"], "default: running, or unread"
    assert await ids("readerId=me&state=unread") == []
    assert set(await ids("readerId=other&state=unread")) == {idle["sessionId"], "s6", "s7"}
    page = (await client.get(f"{SESSIONS}?state=all&limit=2")).json()
    rest = (await client.get(f"{SESSIONS}?state=all&limit=2&cursor={page['nextCursor']}"))
    assert len(page["items"]) == 2 and len(rest.json()["items"]) == 1
    await client.post(f"{SESSIONS}/s7/control", json={"action": "cancel"})
    assert "s7" in await ids("readerId=me&state=unread"), "a change makes it unread again"


async def test_bad_session_requests_get_the_envelope_and_change_nothing(
    client: Any, database_url: str
) -> None:
    session = (await client.post(SESSIONS, json={})).json()
    base = f"{SESSIONS}/{session['sessionId']}"
    before = await snapshot(database_url)
    cases = [
        ("post", SESSIONS, {"bogus": 1}, 400, "invalid-request"),
        ("post", SESSIONS, {"sessionId": "../etc"}, 400, "invalid-request"),
        ("post", SESSIONS, {"backendProfile": "profile-9"}, 400, "invalid-request"),
        ("post", SESSIONS, {"ttlSeconds": "x"}, 400, "invalid-request"),
        ("post", f"{base}/read", {"readerId": 5}, 400, "invalid-request"),
        ("post", f"{base}/control", {"action": "explode"}, 400, "invalid-request"),
        ("post", f"{base}/control", {}, 400, "invalid-request"),
        ("post", f"{base}/storage/refresh", {"storageSizeBytes": -1}, 400, "invalid-request"),
        ("post", f"{base}/storage/refresh", {}, 409, "invalid-transition"),
        ("post", f"/api/v1/runs/{session['runId']}/commands", {"payload": {}}, 400,
         "invalid-request"),
        ("post", f"/api/v1/runs/{session['runId']}/commands",
         {"payload": {"prompt": "x" * 70000}}, 400, "invalid-request"),
        ("post", f"/api/v1/runs/{session['runId']}/commands",
         {"payload": {"prompt": "x"}, "transientEnv": {"OPENAI_API_KEY": "v"}}, 400,
         "schema-invalid"),
        ("post", "/api/v1/runs/run_nope/commands", {"payload": {"prompt": "x"}}, 404,
         "not-found"),
        ("get", f"{SESSIONS}/nope", None, 404, "not-found"),
        ("get", f"{base}/output?afterSeq=-1", None, 400, "invalid-request"),
        ("get", f"{base}/trace?limit=0", None, 400, "invalid-request"),
        ("get", f"{SESSIONS}?state=sideways", None, 400, "invalid-request"),
        ("get", f"{SESSIONS}?limit=501", None, 400, "invalid-request"),
        ("get", f"{SESSIONS}?cursor=zz", None, 400, "invalid-request"),
    ]
    for method, path, body, status, code in cases:
        response = await (client.get(path) if method == "get"
                          else client.post(path, json=body))
        assert response.status_code == status, (path, body, response.text)
        assert response.json()["error"]["code"] == code, (path, body, response.text)
    malformed = await client.post(SESSIONS, content=b"{nope",
                                  headers={"content-type": "application/json"})
    assert malformed.status_code == 400
    assert await snapshot(database_url) == before
    dry = await client.post(f"{base}/read?dryRun=true", json={"readerId": "r"})
    assert dry.json()["mutation"] is False
    assert await snapshot(database_url) == before


async def test_storage_refresh_records_a_posted_runner_summary(client: Any) -> None:
    session_id = (await client.post(SESSIONS, json={})).json()["sessionId"]
    body = {"storageSizeBytes": 10, "storageFilesCount": 2, "storageSha256": "a" * 64,
            "pvcPhase": "Bound", "storageUpdatedAt": "2026-11-22T10:00:00Z"}
    response = await client.post(f"{SESSIONS}/{session_id}/storage/refresh", json=body)
    assert response.status_code == 200, response.text
    storage = response.json()["storage"]
    assert (storage["storageSizeBytes"], storage["storageFilesCount"],
            storage["storageSha256"], storage["pvcPhase"]) == (10, 2, "a" * 64, "Bound")
    ephemeral = (await run_task(client, "no volume"))[1]["latestAttempt"]["sessionId"]
    refused = await client.post(f"{SESSIONS}/{ephemeral}/storage/refresh", json=body)
    assert refused.status_code == 409


async def test_output_paging_with_concurrent_appends_loses_and_repeats_nothing(
    database_url: str, tmp_path: Path
) -> None:
    async with running_api(database_url, tmp_path,
                           {"SVC_SESSION_SYNC_INTERVAL_MS": "20"}) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        session = (await http.post(SESSIONS, json={})).json()
        started = await command(http, session["runId"], "lines: 400\npace: 0.004")
        assert started.status_code == 201, started.text
        session_id = session["sessionId"]

        async def pager(limit: int) -> list[tuple[int, str]]:
            seen: list[tuple[int, str]] = []
            after = 0
            while True:
                page = (await http.get(f"{SESSIONS}/{session_id}/output",
                                       params={"afterSeq": after, "limit": limit})).json()
                seen += [(item["seq"], item["line"]) for item in page["items"]]
                after = page["nextAfterSeq"]
                if not page["running"] and after >= page["lastSeq"]:
                    return seen
                await asyncio.sleep(0.005)

        pages = await asyncio.gather(*(pager(limit) for limit in (1, 7, 50, 1000)))
    expected = [f"line {n}" for n in range(1, 401)]
    for seen in pages:
        seqs = [seq for seq, _ in seen]
        assert seqs == list(range(1, len(seen) + 1)), "monotonic, no gap, no repeat"
        numbered = [line for _, line in seen if line.startswith("line ")]
        assert numbered == expected
    assert pages[0] == pages[1] == pages[2] == pages[3]


async def test_a_replacement_runner_keeps_session_thread_profile_and_volume(
    client: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    write_profile_secret(runner_settings.data_dir, "profile-2")
    first = await submit(client, "first", sessionRef=ref("s8"), backendProfile="profile-2")
    await dispatch(client, first)
    await settle(client, first)
    thread = (await client.get(f"{SESSIONS}/s8")).json()["threadId"]
    task = await submit(client, "sleep: 4", sessionRef=ref("s8"), backendProfile="profile-2")
    attempt = (await dispatch(client, task))["latestAttempt"]
    job = runner_settings.jobs_dir / attempt["runnerJobId"]
    for _ in range(100):
        if (job / "stdout.log").exists() and "thread resumed" in (job / "stdout.log").read_text():
            break
        await asyncio.sleep(0.1)
    os.killpg(int((job / "pid").read_text()), signal.SIGKILL)  # the runner is lost
    lost = await settle(client, task)
    assert lost["state"] == "failed"
    retry = await client.post(f"{TASKS}/{task}/retry",
                              json={"idempotencyKey": "replace", "reason": "runner lost"})
    assert retry.status_code == 200, retry.text
    replacement = retry.json()
    done = await settle(client, task)
    assert done["state"] == "completed"
    assert replacement["attemptId"] != attempt["attemptId"]
    assert replacement["runnerJobId"] != attempt["runnerJobId"]
    assert replacement["sessionId"] == attempt["sessionId"] == "s8"
    session = (await client.get(f"{SESSIONS}/s8")).json()
    assert session["threadId"] == thread and session["backendProfile"] == "profile-2"
    newest = session["recentTurns"][0]
    assert newest["runnerJobId"] == replacement["runnerJobId"] and newest["resumed"]
    rollout = runner_settings.sessions_dir / "s8" / f"{thread}.jsonl"
    assert len(rollout.read_text().splitlines()) == 3, "same volume: every turn in one rollout"
    assert await replay_ok(database_url)


async def test_the_gc_loop_evicts_expired_volumes_on_its_interval(
    database_url: str, tmp_path: Path
) -> None:
    env = {"SVC_SESSION_GC_INTERVAL_MS": "200", "SVC_SESSION_TTL_S": "1",
           "SVC_SESSION_SYNC_INTERVAL_MS": "50"}
    async with running_api(database_url, tmp_path, env) as base, \
            httpx.AsyncClient(base_url=base, timeout=60) as http:
        session_id = (await http.post(SESSIONS, json={})).json()["sessionId"]
        volume = tmp_path / "data" / "sessions" / session_id
        assert volume.is_dir()
        deadline = time.monotonic() + 20
        state = None
        while time.monotonic() < deadline:
            state = (await http.get(f"{SESSIONS}/{session_id}")).json()["storageKind"]
            if state == "evicted":
                break
            await asyncio.sleep(0.2)
    assert state == "evicted" and not volume.exists()
