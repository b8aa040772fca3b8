"""Projections hold no HTTP path (issue 12): the API computes every ``sessionPath`` from the
session id, and migration 0008 removes the path that older rows stored (and fills the
statistic fields it adds exactly as the fold computes them)."""

from __future__ import annotations

from typing import Any

import asyncpg

from ledger.migrate import available_migrations, migrate
from projections.registry import TABLES
from projections.replay import replay
from tests.support import replay_report
from tests.test_dispatch import TASKS, dispatch, run_task, submit

_OLD_PATH = (
    "UPDATE task_summary SET session_path = '/api/v1/sessions/' || (latest_attempt->>'sessionId'),"
    " latest_attempt = replace(latest_attempt::text, '\"sessionId\":\"' ||"
    " (latest_attempt->>'sessionId') || '\"', '\"sessionId\":\"' ||"
    " (latest_attempt->>'sessionId') || '\",\"sessionPath\":\"/api/v1/sessions/' ||"
    " (latest_attempt->>'sessionId') || '\"')::json WHERE latest_attempt IS NOT NULL")


async def _rows_with_api_paths(conn: asyncpg.Connection,
                               tables: tuple[str, ...] = TABLES) -> list[str]:
    found = []
    for table in tables:
        found += [f"{table}: {r['t']}" for r in await conn.fetch(
            f"SELECT row_to_json(r)::text AS t FROM {table} r")
            if "/api/" in r["t"]]
    return found


async def _activity(client: Any) -> tuple[str, dict[str, Any]]:
    """A completed task, a dispatched one, a pending one, a cancelled one and a retry."""
    done_id, done = await run_task(client, "say hello")
    await dispatch(client, await submit(client, "say hello again"))
    await submit(client, "left pending")
    cancelled = await submit(client, "to cancel")
    await dispatch(client, cancelled)
    assert (await client.post(f"{TASKS}/{cancelled}/cancel", json={})).status_code == 200
    failed_id, failed = await run_task(client, "exit: 3")
    assert failed["state"] == "failed", failed
    retried = await client.post(f"{TASKS}/{failed_id}/retry",
                                json={"idempotencyKey": "again", "reason": "flaky"})
    assert retried.status_code == 200, retried.text
    assert (await client.post(f"{TASKS}/{done_id}/read", json={"readerId": "me"})
            ).status_code == 200
    return done_id, done


async def test_no_projection_row_holds_an_api_path(client: Any, database_url: str) -> None:
    done_id, done = await _activity(client)
    conn = await asyncpg.connect(database_url)
    try:
        columns = {r["c"] for r in await conn.fetch(
            "SELECT column_name AS c FROM information_schema.columns"
            " WHERE table_schema = 'public' AND table_name = ANY($1::text[])", list(TABLES))}
        assert "session_path" not in columns
        assert await conn.fetchval("SELECT count(*) FROM task_summary") == 5
        assert await _rows_with_api_paths(conn) == []
    finally:
        await conn.close()
    session = done["latestAttempt"]["sessionId"]
    path = f"/api/v1/sessions/{session}"
    assert done["sessionPath"] == done["latestAttempt"]["sessionPath"] == path
    assert list(done["latestAttempt"]) == [
        "attemptId", "retryIndex", "state", "runId", "commandId", "runnerJobId", "sessionId",
        "sessionPath", "failureKind", "failureMessage", "usage"]
    listed = (await client.get(TASKS)).json()["items"]
    item = next(i for i in listed if i["taskId"] == done_id)
    assert item["latestAttempt"] == done["latestAttempt"] and item["sessionPath"] == path
    attempts = (await client.get(f"{TASKS}/{done_id}/attempts")).json()["items"]
    assert [a["sessionPath"] for a in attempts] == [path]
    commander = (await client.get("/api/v1/queue/commander")).json()["items"]
    assert next(i for i in commander if i["taskId"] == done_id)["sessionPath"] == path
    assert (await replay_report(database_url)).ok


async def test_migration_0008_removes_stored_paths_and_replay_stays_equal(
        client: Any, database_url: str) -> None:
    done_id, _done = await _activity(client)
    before = (await client.get(f"{TASKS}/{done_id}")).json()
    conn = await asyncpg.connect(database_url)
    try:
        live = await conn.fetch("SELECT *, latest_attempt::text AS a FROM task_summary"
                                " ORDER BY task_id")
        assert {r["attempt_count"] for r in live} == {0, 1, 2}
        assert sum(r["last_duration_ms"] is not None for r in live) == 3
        # The rows as the code before 0008 stored them: the path column and key, no
        # statistic fields, no judge runs.
        await conn.execute("DROP TABLE judge_run")
        await conn.execute("ALTER TABLE task_summary DROP COLUMN attempt_count,"
                           " DROP COLUMN last_duration_ms, DROP COLUMN latest_started_at")
        await conn.execute("ALTER TABLE task_summary ADD COLUMN session_path text")
        await conn.execute(_OLD_PATH)
        before_0008 = tuple(t for t in TABLES if t != "judge_run")
        assert len(await _rows_with_api_paths(conn, before_0008)) == 4
        (last,) = [m for m in available_migrations() if m.version == 8]
        await conn.execute("DELETE FROM schema_migrations WHERE version = 8")
        assert [m.version for m in await migrate(conn)] == [last.version]
        assert await _rows_with_api_paths(conn) == []
        migrated = await conn.fetch("SELECT *, latest_attempt::text AS a FROM task_summary"
                                    " ORDER BY task_id")
        assert [dict(r) for r in migrated] == [dict(r) for r in live]
        assert (await replay(conn)).ok
    finally:
        await conn.close()
    assert (await client.get(f"{TASKS}/{done_id}")).json() == before
