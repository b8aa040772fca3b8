"""Sessions count toward a per-tenant cap of live sessions (``SVC_MAX_SESSIONS_PER_TENANT``,
issue 26 item 6): a create past it is refused with 429 ``session-limit-reached`` and changes
nothing, two creates racing at the cap's edge never both pass, and only live sessions of the
same tenant count."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx

from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.test_dispatch import TASKS, dispatch, settle, submit

SESSIONS = "/api/v1/sessions"


def ref(session_id: str) -> dict[str, str]:
    return {"sessionId": session_id, "conversationId": "cnv_" + session_id}
WAITING = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
           "AND wait_event_type = 'Lock'")
"""Backends of the test's database waiting for a lock."""
HOLD = ("INSERT INTO session_summary (session_id, conversation_id, backend_profile, state, "
        "storage_kind, ttl_seconds, expires_at, turns, version, change_seq, creator, "
        "created_at, updated_at) VALUES ($1, 'cnv_held', 'profile-1', 'idle', 'none', 1, "
        "now(), 0, 1, 4611686018427387904, 'test', now(), now())")
"""A row the test holds uncommitted: a create of the same session waits for it."""
TABLES = ("session_summary", "session_turn", "run_record", "attempt_summary", "task_summary",
          "runner_job_record")


@asynccontextmanager
async def capped(url: str, settings: RunnerSettings, cap: int) -> AsyncIterator[httpx.AsyncClient]:
    """The app with at most ``cap`` live sessions per tenant."""
    async with app_client(url, dataclasses.replace(settings, max_sessions_per_tenant=cap)) \
            as client:
        yield client


async def snapshot(url: str) -> dict[str, Any]:
    """The ledger's high-water mark and every projection a create could touch, whole."""
    conn = await asyncpg.connect(url)
    try:
        found: dict[str, Any] = {"ledger": await conn.fetchval(
            "SELECT coalesce(max(change_seq), 0) FROM ledger")}
        for table in TABLES:
            found[table] = await conn.fetchval(
                f"SELECT coalesce(string_agg(t::text, '|' ORDER BY t::text), '') "
                f"FROM {table} t")
        return found
    finally:
        await conn.close()


async def create(client: httpx.AsyncClient, session_id: str | None = None) -> httpx.Response:
    return await client.post(SESSIONS, json={"sessionId": session_id} if session_id else {})


async def waiting(conn: asyncpg.Connection, count: int,
                  running: list[asyncio.Task[httpx.Response]]) -> None:
    """Until ``count`` backends of the test database wait for a lock (the requests still
    running)."""
    deadline = time.monotonic() + 30  # within the client's 60 s
    while await conn.fetchval(WAITING) < count:
        assert time.monotonic() < deadline, f"{count} backends wait for a lock"
        assert not any(task.done() for task in running), [
            task.result().text for task in running if task.done()]
        await asyncio.sleep(0.05)


def refused(answer: httpx.Response) -> bool:
    """Whether the answer is the cap's refusal, in the error envelope."""
    if answer.status_code != 429:
        return False
    error = answer.json()["error"]
    return bool(error["code"] == "session-limit-reached" and error["details"]["limit"] >= 1)


async def test_a_create_past_the_cap_is_refused_and_changes_nothing(
    app_url: str, database_url: str, runner_settings: RunnerSettings
) -> None:
    async with capped(app_url, runner_settings, 2) as client:
        for name in ("ses_cap1", "ses_cap2"):
            assert (await create(client, name)).status_code == 201
        before = await snapshot(database_url)
        answer = await create(client, "ses_cap3")
        assert refused(answer), answer.text
        assert answer.json()["error"]["details"]["liveSessions"] == 2
        assert refused(await create(client))
        assert await snapshot(database_url) == before
        assert (runner_settings.sessions_dir / "ses_cap1").is_dir()
        assert not (runner_settings.sessions_dir / "ses_cap3").exists()
        again = await create(client, "ses_cap1")  # an existing session is found, not counted
        assert again.status_code == 201, again.text
        assert (await client.get(f"{SESSIONS}/ses_cap3")).status_code == 404


async def test_two_creates_at_the_last_free_place_never_both_pass(
    app_url: str, database_url: str, runner_settings: RunnerSettings
) -> None:
    """The first create's commit is held (the test holds an uncommitted row of its session
    id) until the second has reached the database too: counted without waiting, it would
    pass; under the tenant's lock it waits, and counts the first once that commits."""
    async with capped(app_url, runner_settings, 3) as client:
        for name in ("ses_race1", "ses_race2"):
            assert (await create(client, name)).status_code == 201
        holder = await asyncpg.connect(database_url)
        watcher = await asyncpg.connect(database_url)  # outside the held transaction: its
        try:  # view of the backends is fresh at every statement
            held = holder.transaction()
            await held.start()
            await holder.execute(HOLD, "ses_first")
            first = asyncio.create_task(create(client, "ses_first"))
            await waiting(watcher, 1, [first])  # its commit waits for the held row
            second = asyncio.create_task(create(client, "ses_second"))
            await waiting(watcher, 2, [first, second])  # it waits at the tenant's lock
            await held.rollback()
            assert (await first).status_code == 201
            assert refused(await second)
            assert await watcher.fetchval("SELECT count(*) FROM session_summary") == 3
        finally:
            await holder.close()
            await watcher.close()


async def test_a_dispatch_opening_a_session_past_its_tenants_cap_is_refused_before_anything(
    app_url: str, database_url: str, runner_settings: RunnerSettings
) -> None:
    async with capped(app_url, runner_settings, 1) as client:
        first = await submit(client, "say hello", sessionRef=ref("ses_acme1"))
        await dispatch(client, first)
        assert (await settle(client, first, timeout=60))["state"] == "completed"
        second = await submit(client, "say hello", sessionRef=ref("ses_acme2"))
        before = await snapshot(database_url)
        answer = await client.post(f"{TASKS}/{second}/dispatch", json={})
        assert refused(answer), answer.text
        assert answer.json()["error"]["details"]["tenantId"] == "acme"
        assert await snapshot(database_url) == before
        assert (await client.get(f"{TASKS}/{second}")).json()["state"] == "pending"
        other = await submit(client, "say hello", tenantId="globex",
                             sessionRef=ref("ses_globex1"))
        await dispatch(client, other)  # another tenant's sessions do not count
        assert (await settle(client, other, timeout=60))["state"] == "completed"
        assert (await create(client, "ses_no_tenant")).status_code == 201
        reuse = await submit(client, "again", sessionRef=ref("ses_acme1"))
        await dispatch(client, reuse)  # a turn in a live session opens none
        assert (await settle(client, reuse, timeout=60))["state"] == "completed"
