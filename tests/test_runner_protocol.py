"""The runner protocol (DESIGN 9) against the real app and ledger: per-job tokens, the claim,
numbered line batches, reports, the storage summary, GETs that never write, the lease."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import asyncpg
import httpx

from ledger.database import create_pool
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from runner_assembly.drivers.local import LocalDriver
from runner_assembly.orchestration.runner_protocol import RunnerProtocol
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import snapshot
from tests.test_dispatch import (
    TASKS,
    dispatch,
    job_dirs,
    process_alive,
    runner_paused,
    settle,
    submit,
)

JOBS = "/api/v1/runner/jobs"
SESSIONS = "/api/v1/sessions"


@asynccontextmanager
async def protocol_on(url: str, tmp: Path) -> AsyncIterator[RunnerProtocol]:
    """The manager's runner protocol on the test database, outside the app (to issue tokens
    for jobs no runner holds)."""
    pool = await create_pool(url, max_size=2)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        yield RunnerProtocol(pool, writer, LocalDriver(tmp / "jobs", tmp / "s", "off"), 60)
    finally:
        await writer.close()
        await pool.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def events_of(url: str, stream_id: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT event_type FROM ledger WHERE stream_id = $1 "
                                "ORDER BY change_seq", stream_id)
        return [r["event_type"] for r in rows]
    finally:
        await conn.close()


async def stored_lines(url: str, session_id: str, channel: str) -> list[tuple[int, str]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT seq, line FROM session_line WHERE session_id = $1 AND "
                                "channel = $2 ORDER BY seq", session_id, channel)
        return [(r["seq"], r["line"]) for r in rows]
    finally:
        await conn.close()


async def test_a_token_speaks_for_its_own_live_job_only(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token_a = await protocol.issue("job_a", session_id="ses_a", run_id="run_a")
        token_b = await protocol.issue("job_b", session_id="ses_b", run_id="run_b")
    assert token_a != token_b and token_a.startswith("job_a.")
    before = await snapshot(database_url)
    for headers in (auth(token_a), {}, auth("job_b.guess"), {"Authorization": token_b},
                    auth(token_b + "x")):
        refused = await client.post(f"{JOBS}/job_b/claim", json={"claimant": "r1"},
                                    headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "unauthorized"
        assert token_a not in refused.text and token_b not in refused.text
    assert await snapshot(database_url) == before, "a refused token changes nothing"
    conn = await asyncpg.connect(database_url)
    try:
        stored = await conn.fetchval("SELECT string_agg(payload::text, ' ') FROM ledger")
    finally:
        await conn.close()
    assert token_a not in stored and token_a.split(".")[1] not in stored, "hash only"

    first = await client.post(f"{JOBS}/job_a/claim", json={"claimant": "r1"},
                              headers=auth(token_a))
    second = await client.post(f"{JOBS}/job_a/claim", json={"claimant": "r2"},
                               headers=auth(token_a))
    again = await client.post(f"{JOBS}/job_a/claim", json={"claimant": "r1"},
                              headers=auth(token_a))
    assert (first.json()["start"], second.json()["start"], again.json()["start"]) == (
        True, False, True), "the first claim wins; a resent claim is still the winner's"
    assert (await events_of(database_url, "job_a")).count("job-claimed") == 1

    ended = await client.post(f"{JOBS}/job_a/exit", json={"state": "completed", "exitCode": 0},
                              headers=auth(token_a))
    assert ended.status_code == 200, ended.text
    resent = await client.post(f"{JOBS}/job_a/exit", json={"state": "completed", "exitCode": 0},
                               headers=auth(token_a))
    assert resent.status_code == 200, "the same exit sent again (its answer lost) is accepted"
    assert (await events_of(database_url, "job_a")).count("job-exited") == 1
    for path, body in (("heartbeat", {}), ("lines", {"channel": "output", "seq": 1,
                                                     "lines": ["late"]}),
                       ("exit", {"state": "failed"})):
        late = await client.post(f"{JOBS}/job_a/{path}", json=body, headers=auth(token_a))
        assert late.status_code == 401, (path, late.text)
    async with protocol_on(database_url, tmp_path) as protocol:
        await protocol.end("job_b", "cancelled")
    late = await client.post(f"{JOBS}/job_b/claim", json={"claimant": "r1"},
                             headers=auth(token_b))
    assert late.status_code == 401, "an ended job's token is refused"


async def test_line_batches_are_taken_once_in_order_and_bad_bodies_change_nothing(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_l", session_id="ses_l", run_id="run_l")
    headers = auth(token)
    unclaimed = await client.post(f"{JOBS}/job_l/lines", headers=headers,
                                  json={"channel": "output", "seq": 1, "lines": ["x"]})
    assert unclaimed.status_code == 409, "only a claimed job sends lines"
    await client.post(f"{JOBS}/job_l/claim", json={"claimant": "r1"}, headers=headers)
    before = await snapshot(database_url)
    bad = [("claim", {}), ("claim", {"claimant": "has space"}),
           ("lines", {"channel": "debug", "seq": 1, "lines": []}),
           ("lines", {"channel": "output", "seq": 0, "lines": []}),
           ("lines", {"channel": "output", "seq": 1, "lines": "x"}),
           ("lines", {"channel": "output", "seq": 1, "lines": [], "extra": 1}),
           ("thread", {"threadId": "../x", "mode": "start"}),
           ("thread", {"threadId": "t1", "mode": "fork"}),
           ("exit", {"state": "running"}), ("exit", {"state": "failed", "exitCode": "1"}),
           ("assembly", {"assembly": "x"}), ("assembly", {"assembly": {"k": "a\x00b"}}),
           ("heartbeat", {"x": 1})]
    for path, body in bad:
        answer = await client.post(f"{JOBS}/job_l/{path}", json=body, headers=headers)
        assert answer.status_code == 400, (path, body, answer.text)
        assert answer.json()["error"]["code"] == "invalid-request"
    malformed = await client.post(f"{JOBS}/job_l/lines", content=b"{nope", headers={
        **headers, "content-type": "application/json"})
    assert malformed.status_code == 400
    gap = await client.post(f"{JOBS}/job_l/lines", headers=headers,
                            json={"channel": "output", "seq": 2, "lines": ["b"]})
    assert gap.status_code == 409 and gap.json()["error"]["details"]["expectedSeq"] == 1
    assert await snapshot(database_url) == before, "refusals change nothing"

    batch = {"channel": "output", "seq": 1, "lines": ["one", "two\x00", "ghp_" + "a" * 36]}
    first = await client.post(f"{JOBS}/job_l/lines", json=batch, headers=headers)
    resent = await client.post(f"{JOBS}/job_l/lines", json=batch, headers=headers)
    assert (first.json()["accepted"], resent.json()["accepted"]) == (True, False)
    await client.post(f"{JOBS}/job_l/lines", headers=headers,
                      json={"channel": "trace", "seq": 1, "lines": ["t"]})
    await client.post(f"{JOBS}/job_l/lines", headers=headers,
                      json={"channel": "output", "seq": 2, "lines": ["three"]})
    lines = await stored_lines(database_url, "ses_l", "output")
    assert [seq for seq, _ in lines] == [1, 2, 3, 4]
    assert lines[0][1] == "one" and lines[1][1] == "two\ufffd" and lines[3][1] == "three"
    assert "a" * 36 not in lines[2][1], "a token-shaped value is redacted as a second net"
    assert await stored_lines(database_url, "ses_l", "trace") == [(1, "t")]

    thread = await client.post(f"{JOBS}/job_l/thread", headers=headers,
                               json={"threadId": "thr_1", "mode": "start"})
    assembly = await client.post(f"{JOBS}/job_l/assembly", headers=headers,
                                 json={"assembly": {"steps": ["a"], "repoUrl": "x"}})
    beat = await client.post(f"{JOBS}/job_l/heartbeat", headers=headers)
    assert (thread.status_code, assembly.status_code, beat.status_code) == (200, 200, 200)
    assert beat.json()["leaseSeconds"] == 60
    assert await events_of(database_url, "job_l") == [
        "job-token-issued", "job-claimed", "job-thread-reported", "job-assembly-reported"
    ], "a heartbeat renews the lease row, not the ledger (tests/test_lease.py)"


async def test_storage_refresh_takes_snake_case_names_and_checks_a_runner_token(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    session_id = (await client.post(SESSIONS, json={})).json()["sessionId"]
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_s", session_id=session_id, run_id="run_s")
        other = await protocol.issue("job_o", session_id="ses_other", run_id="run_o")
    snake = {"storage_size_bytes": 12, "storage_files_count": 3,
             "storage_sha256": "b" * 64, "pvc_phase": "Bound",
             "storage_updated_at": "2026-11-22T10:00:00Z"}
    before = await snapshot(database_url)
    refused = await client.post(f"{SESSIONS}/{session_id}/storage/refresh", json=snake,
                                headers=auth(other))
    assert refused.status_code == 401, "a token of another session's job is refused"
    twice = await client.post(f"{SESSIONS}/{session_id}/storage/refresh",
                              json={**snake, "storageSizeBytes": 1}, headers=auth(token))
    assert twice.status_code == 400 and twice.json()["error"]["code"] == "invalid-request"
    assert await snapshot(database_url) == before
    answer = await client.post(f"{SESSIONS}/{session_id}/storage/refresh", json=snake,
                               headers=auth(token))
    assert answer.status_code == 200, answer.text
    storage = answer.json()["storage"]
    assert (storage["storageSizeBytes"], storage["storageFilesCount"],
            storage["storageSha256"]) == (12, 3, "b" * 64)


async def high_water(url: str) -> tuple[int, int]:
    conn = await asyncpg.connect(url)
    try:
        return (await conn.fetchval("SELECT last_seq FROM ledger_head"),
                await conn.fetchval("SELECT count(*) FROM session_line"))
    finally:
        await conn.close()


async def test_gets_never_change_the_ledger_high_water_mark(
    client: httpx.AsyncClient, database_url: str, runner_settings: RunnerSettings
) -> None:
    task_id = await submit(client, "lines: 3\nsleep: 4",
                           sessionRef={"sessionId": "ses_get", "conversationId": "cnv_get"})
    await dispatch(client, task_id)
    base = f"{SESSIONS}/ses_get"
    deadline = time.monotonic() + 20
    while not (await client.get(f"{base}/output")).json()["items"]:
        assert time.monotonic() < deadline, "the runner sent its output lines"
        await asyncio.sleep(0.1)
    checked = 0
    async with runner_paused(runner_settings):  # its late trace batch cannot land meanwhile
        for _ in range(5):
            before = await high_water(database_url)
            for path in (base, f"{base}/output", f"{base}/trace", f"{SESSIONS}?state=all",
                         f"{TASKS}/{task_id}"):
                assert (await client.get(path)).status_code == 200
            if await high_water(database_url) == before:
                checked += 1
            await asyncio.sleep(0.2)
    assert checked == 5, "no GET wrote to the ledger or the line store"
    task = await settle(client, task_id)
    assert task["state"] == "completed"
    before = await high_water(database_url)
    for path in (base, f"{base}/output", f"{base}/trace"):
        assert (await client.get(path)).status_code == 200
    assert await high_water(database_url) == before


async def test_a_lost_lease_ends_the_attempt_runner_lost_and_a_retry_keeps_the_session(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = dataclasses.replace(runner_settings, runner_heartbeat_s=0.3, runner_lease_s=5.0)
    ref = {"sessionId": "ses_lease", "conversationId": "cnv_lease"}
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "sleep: 30", sessionRef=ref)
        first = (await dispatch(client, task_id))["latestAttempt"]
        (job,) = job_dirs(settings)
        await asyncio.sleep(3.5)
        alive = (await client.post(f"{TASKS}/{task_id}/refresh")).json()
        assert alive["state"] == "running", "heartbeats keep the lease"
        runner_pid = int((job / "pid").read_text())
        os.kill(runner_pid, signal.SIGSTOP)  # a runner that hangs: no more heartbeats
        await asyncio.sleep(6)
        dry = (await client.post(f"{TASKS}/{task_id}/refresh?dryRun=true")).json()
        assert dry["mutation"] is False
        lost = (await client.post(f"{TASKS}/{task_id}/refresh")).json()
        assert lost["state"] == "failed", lost
        assert lost["latestAttempt"]["failureKind"] == "runner-lost"
        deadline = time.monotonic() + 10
        while process_alive(runner_pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not process_alive(runner_pid), "what was left of the job was stopped"
        session = (await client.get(f"{SESSIONS}/ses_lease")).json()
        retry = await client.post(f"{TASKS}/{task_id}/retry",
                                  json={"idempotencyKey": "after-lost", "reason": "lost"})
        assert retry.status_code == 200, retry.text
        attempt = retry.json()
        assert attempt["attemptId"] != first["attemptId"]
        assert attempt["sessionId"] == first["sessionId"] == "ses_lease"
        again = (await client.get(f"{SESSIONS}/ses_lease")).json()
        assert (again["backendProfile"], again["conversationId"], again["threadId"],
                again["storage"]["pvcName"]) == (
            session["backendProfile"], session["conversationId"], session["threadId"],
            session["storage"]["pvcName"])
        await client.post(f"{TASKS}/{task_id}/cancel", json={})
    events = await events_of(database_url, job.name)
    assert events[:2] == ["job-token-issued", "job-claimed"] and events[-1] == "job-ended"
    assert "job-heartbeat" not in events and "job-exited" not in events
