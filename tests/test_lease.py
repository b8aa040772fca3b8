"""Liveness apart from history (issue 29 item 1): a heartbeat renews its job's lease row in
place, checked like any runner report, and leaves the ledger, its head (the polling high-water
mark and the read cache's key) and replay alone; the lease check reads the row, and the
``job-heartbeat`` entries of older ledgers still count."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import asyncpg
import httpx

from ledger import leases
from ledger.runner_job import Heartbeat
from ledger.states import FailureKind, JobState
from projections.replay import replay
from runner_assembly.orchestration.runner_protocol import ACTOR, token_hash
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle, submit
from tests.test_runner_protocol import JOBS, auth, events_of, protocol_on

BEATS = 25


async def head_and_size(url: str) -> tuple[object, ...]:
    """The ledger head (sequence, hash, epoch) and its number of entries."""
    conn = await asyncpg.connect(url)
    try:
        head = await conn.fetchrow("SELECT last_seq, last_hash, epoch FROM ledger_head")
        return (*head, await conn.fetchval("SELECT count(*) FROM ledger"))
    finally:
        await conn.close()


async def lease_row(url: str, runner_job_id: str) -> tuple[datetime, int] | None:
    conn = await asyncpg.connect(url)
    try:
        row = await conn.fetchrow("SELECT last_seen, renewals FROM runner_job_leases "
                                  "WHERE runner_job_id = $1", runner_job_id)
        return None if row is None else (row["last_seen"], row["renewals"])
    finally:
        await conn.close()


async def test_heartbeats_renew_the_lease_row_and_leave_the_ledger_and_its_head_alone(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_hb", session_id="ses_hb", run_id="run_hb")
        other = await protocol.issue("job_hb2", session_id="ses_hb2", run_id="run_hb2")
    headers = auth(token)
    before = await head_and_size(database_url)
    unclaimed = await client.post(f"{JOBS}/job_hb/heartbeat", headers=headers)
    assert unclaimed.status_code == 409, "claim first, as before"
    for refused in (auth(other), auth(token + "x"), {}):
        answer = await client.post(f"{JOBS}/job_hb/heartbeat", headers=refused)
        assert answer.status_code == 401, answer.text
    assert await lease_row(database_url, "job_hb") is None, "a refused beat renews nothing"
    assert await head_and_size(database_url) == before

    claim = await client.post(f"{JOBS}/job_hb/claim", json={"claimant": "r1"}, headers=headers)
    assert claim.json()["start"] is True
    claimed = await head_and_size(database_url)
    first_seen = None
    for beat in range(BEATS):
        answer = await client.post(f"{JOBS}/job_hb/heartbeat", headers=headers)
        assert answer.status_code == 200, answer.text
        row = await lease_row(database_url, "job_hb")
        assert row is not None and row[1] == beat + 1
        first_seen = first_seen or row[0]
    for refused in (auth(other), auth(token + "x")):  # the row now holds job_hb's token
        answer = await client.post(f"{JOBS}/job_hb/heartbeat", headers=refused)
        assert answer.status_code == 401, answer.text
    assert (await lease_row(database_url, "job_hb"))[1] == BEATS  # type: ignore[index]
    assert await head_and_size(database_url) == claimed, \
        "no entry, the high-water mark and the read cache's key stay where the claim left them"
    last = await lease_row(database_url, "job_hb")
    assert last is not None and first_seen is not None and last[0] >= first_seen
    entries = await events_of(database_url, "job_hb")
    assert entries == ["job-token-issued", "job-claimed"]
    print(f"\nledger entries of a job that beat {BEATS} times: {len(entries)} "
          f"(one per beat before: {len(entries) + BEATS})")

    ended = await client.post(f"{JOBS}/job_hb/exit", json={"state": "completed"}, headers=headers)
    assert ended.status_code == 200
    late = await client.post(f"{JOBS}/job_hb/heartbeat", headers=headers)
    assert late.status_code == 401, "an exited job's token is refused, as before"
    assert (await lease_row(database_url, "job_hb"))[1] == BEATS  # type: ignore[index]
    async with protocol_on(database_url, tmp_path) as protocol:
        await protocol.end("job_hb", "finished")
    assert await lease_row(database_url, "job_hb") is None, "an ended job's row goes"


async def test_the_lease_check_reads_the_row_and_old_ledgers_heartbeat_entries(
    database_url: str, tmp_path: Path
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        lease = protocol.lease
        for job in ("job_row", "job_old"):
            (tmp_path / "jobs" / job).mkdir(parents=True)  # the driver sees it being created
            token = await protocol.issue(job, session_id=f"ses_{job}", run_id=f"run_{job}")
            assert await protocol.claim(job, token, "r1")
        claimed = await protocol.job("job_row")
        assert claimed is not None
        at = datetime.fromisoformat(claimed.last_seen)
        late = at + lease + timedelta(seconds=30)
        lost = await protocol.status("job_row", stop_lost=False, now=late)
        assert lost.failure_kind == FailureKind.RUNNER_LOST, "silent since the claim"
        await leases.renew(protocol.pool, "job_row", at + timedelta(seconds=40))
        await leases.renew(protocol.pool, "job_row", at + timedelta(seconds=5))  # late, older
        assert (await protocol.status("job_row", stop_lost=False, now=late)).state \
            == JobState.RUNNING, "the row renewed the lease (and an older beat did not undo it)"
        later = at + timedelta(seconds=40) + lease + timedelta(seconds=1)
        assert (await protocol.status("job_row", stop_lost=False, now=later)).failure_kind \
            == FailureKind.RUNNER_LOST

        # A ledger written before leases: its job-heartbeat entries still renew the lease.
        beat_at = (at + timedelta(seconds=50)).isoformat()
        await protocol.writer.execute(Heartbeat("job_old", token_hash(token), beat_at), ACTOR)
        assert (await events_of(database_url, "job_old"))[-1] == "job-heartbeat"
        old = await protocol.job("job_old")
        assert old is not None and old.last_seen == beat_at
        assert (await protocol.status("job_old", stop_lost=False, now=late)).state \
            == JobState.RUNNING
    conn = await asyncpg.connect(database_url)
    try:
        assert (await replay(conn)).ok, "replay reads old heartbeats and needs no lease row"
    finally:
        await conn.close()


async def test_a_runner_outlives_its_lease_on_heartbeats_alone(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = dataclasses.replace(runner_settings, runner_heartbeat_s=0.2, runner_lease_s=3.0)
    async with renewed_job(database_url, settings, "sleep: 30") as (client, task_id, job, row):
        refreshed = (await client.post(f"{TASKS}/{task_id}/refresh")).json()
        assert refreshed["state"] == "running", refreshed
        await client.post(f"{TASKS}/{task_id}/cancel", json={})
    events = await events_of(database_url, job)
    assert "job-heartbeat" not in events and row[1] >= 3


async def test_a_runner_printing_steadily_is_kept_alive_by_its_line_batches(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    """A batch of lines the manager takes renews the lease, and the runner leaves out the
    beats it made needless: lines for twice the lease, hardly a heartbeat, never lost."""
    settings = dataclasses.replace(runner_settings, runner_heartbeat_s=0.5, runner_lease_s=3.0)
    async with renewed_job(database_url, settings, "lines: 40\npace: 0.15") as (
            client, task_id, _, row):
        assert row[1] <= 3, f"{row[1]} heartbeats: a beat a batch made needless was sent"
        settled = await settle(client, task_id)
        assert settled["state"] == "completed", settled
        session = settled["latestAttempt"]["sessionId"]
        page = (await client.get(f"/api/v1/sessions/{session}/output",
                                 params={"limit": 100})).json()
        assert [item["line"] for item in page["items"] if item["line"].startswith("line ")] \
            == [f"line {n}" for n in range(1, 41)]


@asynccontextmanager
async def renewed_job(database_url: str, settings: RunnerSettings, prompt: str
                      ) -> AsyncIterator[tuple[httpx.AsyncClient, str, str, tuple[datetime, int]]]:
    """A task of ``prompt`` dispatched, once its job's lease was renewed past the lease (see
    :func:`renewed_past_lease`): the app's client, the task, its runner job and lease row."""
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, prompt)
        await dispatch(client, task_id)
        (job,) = job_dirs(settings)
        row = await renewed_past_lease(database_url, job.name, settings.runner_lease_s)
        yield client, task_id, job.name, row


async def renewed_past_lease(database_url: str, runner_job_id: str,
                             lease_s: float) -> tuple[datetime, int]:
    """Wait until the job's lease row was renewed past its claim plus 1.2 leases (the claim
    alone would have expired by then): the row's last renewal and its count of beats."""
    lease = timedelta(seconds=lease_s)
    conn = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + 60
        while (claimed := await conn.fetchval(
                "SELECT payload->>'at' FROM ledger WHERE stream_id = $1 AND "
                "event_type = 'job-claimed'", runner_job_id)) is None:
            assert time.monotonic() < deadline, "the runner never claimed"
            await asyncio.sleep(0.1)
        while True:
            row = await lease_row(database_url, runner_job_id)
            if row and row[0] > datetime.fromisoformat(claimed) + lease * 1.2:
                return row
            assert time.monotonic() < deadline, "nothing renewed the lease"
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def test_a_renewal_does_not_wait_for_the_flush_and_nothing_after_it_inherits_that(
    database_url: str
) -> None:
    """A held-token renewal is liveness: its own transaction commits without waiting for the
    WAL flush, and only its own: the setting ends with it, so the next statement on the same
    (pooled) connection, e.g. a ledger commit, waits for the flush as before."""
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
        await conn.execute("INSERT INTO runner_job_leases (runner_job_id, last_seen, "
                           "token_sha256, session_id) VALUES ('job_async', now(), 'h', 's')")
        before = await lease_row(database_url, "job_async")
        assert before is not None
        at = datetime.now().astimezone() + timedelta(seconds=5)
        async with conn.transaction():
            assert await leases.renew_held(conn, "job_async", "h", at)
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
        assert not await leases.renew_held(conn, "job_async", "another token", at)
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
        row = await lease_row(database_url, "job_async")
        assert row == (at, before[1] + 1)  # renewed once: the refused token changed nothing
    finally:
        await conn.close()
