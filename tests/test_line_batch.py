"""A runner's batch of lines in one round trip (issue 29, migration 0023): under a token its
job's lease row holds, the token check, a lease renewal (not a heartbeat: ``renewals`` stays)
and the append are one call; every answer of the statement-by-statement path stays as it was
(a resent batch once, a gap refused, the output bound's notice, an exited or ended job's
token refused), and the line store and ledger stay consistent."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from ledger import session_lines
from ledger.database import create_pool
from ledger.errors import InvalidTransition
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import snapshot
from tests.test_lease import lease_row
from tests.test_runner_protocol import JOBS, auth, protocol_on, stored_lines
from tests.test_sessions import replay_ok

BOUND = 500
LONG_AGO = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    yield connection
    await connection.close()


async def claimed_and_held(client: httpx.AsyncClient, database_url: str, tmp_path: Path,
                           jobs: dict[str, str]) -> dict[str, dict[str, str]]:
    """Tokens for ``jobs`` (job id: session id), each claimed and beaten once (its lease row
    then holds the token), the rows set back to :data:`LONG_AGO`; the headers of each."""
    async with protocol_on(database_url, tmp_path) as protocol:
        tokens = {job: await protocol.issue(job, session_id=session, run_id=f"run_{job}")
                  for job, session in jobs.items()}
    headers = {job: auth(token) for job, token in tokens.items()}
    for job in jobs:
        claim = await client.post(f"{JOBS}/{job}/claim", json={"claimant": "r1"},
                                  headers=headers[job])
        assert claim.json()["start"] is True
        assert (await client.post(f"{JOBS}/{job}/heartbeat", headers=headers[job])).is_success
    admin = await asyncpg.connect(database_url)
    try:
        await admin.execute("UPDATE runner_job_leases SET last_seen = $1", LONG_AGO)
    finally:
        await admin.close()
    return headers


async def sources(url: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT * FROM session_line_source ORDER BY runner_job_id, "
                                "channel")
        return [tuple(row.values()) for row in rows]
    finally:
        await conn.close()


async def test_a_batch_under_the_held_token_renews_the_lease_once_and_is_taken_once(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    headers = await claimed_and_held(client, database_url, tmp_path,
                                     {"job_f": "ses_f", "job_g": "ses_g"})
    bad = {"channel": "trace", "seq": 1, "stream": "stderr", "lines": ["t"]}
    for token, status in ((headers["job_g"], 401), (headers["job_f"], 400)):
        answer = await client.post(f"{JOBS}/job_f/lines", json=bad, headers=token)
        assert answer.status_code == status, "the token first, then the batch, as before"
    assert await lease_row(database_url, "job_f") == (LONG_AGO, 1), "a refusal renews nothing"
    send = {"channel": "output", "seq": 1, "lines": ["one", "two\x00", "ghp_" + "a" * 36]}
    first = await client.post(f"{JOBS}/job_f/lines", json=send, headers=headers["job_f"])
    assert first.status_code == 200 and first.json()["accepted"] is True, first.text
    row = await lease_row(database_url, "job_f")
    assert row is not None and row[0] > LONG_AGO, "the batch renewed the lease"
    assert row[1] == 1, "renewals counts heartbeats, not line batches"
    assert await lease_row(database_url, "job_g") == (LONG_AGO, 1), "its own lease only"

    resent = await client.post(f"{JOBS}/job_f/lines", json=send, headers=headers["job_f"])
    assert resent.status_code == 200 and resent.json()["accepted"] is False
    stored = await stored_lines(database_url, "ses_f", "output")
    assert [seq for seq, _ in stored] == [1, 2, 3]
    assert stored[1][1] == "two\ufffd" and "a" * 36 not in stored[2][1], "as before the call"

    before, taken = await snapshot(database_url), await sources(database_url)
    gap = await client.post(f"{JOBS}/job_f/lines", headers=headers["job_f"],
                            json={"channel": "output", "seq": 3, "lines": ["late"]})
    assert gap.status_code == 409 and gap.json()["error"]["details"]["expectedSeq"] == 2
    for refused, job in ((headers["job_g"], "job_f"), (auth("job_f.guess"), "job_f"),
                         (headers["job_f"], "job_g")):
        answer = await client.post(f"{JOBS}/{job}/lines", headers=refused,
                                   json={"channel": "output", "seq": 2, "lines": ["x"]})
        assert answer.status_code == 401, answer.text
    assert await lease_row(database_url, "job_g") == (LONG_AGO, 1), "a refused batch renews nothing"
    assert (await snapshot(database_url), await sources(database_url)) == (before, taken)

    stderr = await client.post(f"{JOBS}/job_f/lines", headers=headers["job_f"], json={
        "channel": "output", "seq": 1, "stream": "stderr", "lines": ["warn"]})
    assert stderr.json()["accepted"] is True
    assert (await stored_lines(database_url, "ses_f", "output"))[-1] == (4, "warn")
    assert await replay_ok(database_url), "lines are not ledger history: replay agrees"


async def test_an_exited_or_ended_jobs_token_is_refused_and_stores_nothing(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    headers = await claimed_and_held(client, database_url, tmp_path,
                                     {"job_x": "ses_x", "job_e": "ses_e"})
    for job in ("job_x", "job_e"):
        sent = await client.post(f"{JOBS}/{job}/lines", headers=headers[job],
                                 json={"channel": "output", "seq": 1, "lines": ["kept"]})
        assert sent.json()["accepted"] is True
    exited = await client.post(f"{JOBS}/job_x/exit", json={"state": "completed"},
                               headers=headers["job_x"])
    assert exited.status_code == 200
    async with protocol_on(database_url, tmp_path) as protocol:
        await protocol.end("job_e", "cancelled")
    seen = await lease_row(database_url, "job_x")
    before = await snapshot(database_url)
    for job in ("job_x", "job_e"):
        late = await client.post(f"{JOBS}/{job}/lines", headers=headers[job],
                                 json={"channel": "output", "seq": 2, "lines": ["late"]})
        assert late.status_code == 401, late.text
    assert await snapshot(database_url) == before
    assert await lease_row(database_url, "job_x") == seen, "no renewal after the exit"
    assert await lease_row(database_url, "job_e") is None


async def test_a_held_batch_crossing_the_bound_keeps_what_fits_and_one_notice(
    app_url: str, database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    settings = dataclasses.replace(runner_settings, output_max_bytes=BOUND)
    batch = [f"line {n:04d}" for n in range(30)]  # 10 bytes each with the newline
    async with app_client(app_url, settings) as client:
        headers = (await claimed_and_held(client, database_url, tmp_path,
                                          {"job_b": "ses_b"}))["job_b"]
        for seq, stream in ((1, "stdout"), (2, "stdout"), (1, "stderr"), (3, "stdout")):
            answer = await client.post(f"{JOBS}/job_b/lines", headers=headers, json={
                "channel": "output", "seq": seq, "stream": stream, "lines": batch})
            assert answer.json()["accepted"] is True, answer.text
    texts = [line for _, line in await stored_lines(database_url, "ses_b", "output")]
    assert texts[:-1] == batch + batch[:20], "300 bytes taken whole, then 200 of 300"
    assert f"past its bound of {BOUND} bytes" in texts[-1] and len(texts) == 51
    assert [(channel, offset, batch_seq) for _, channel, offset, batch_seq
            in await sources(database_url)] == [("output", 900, 3), ("output:stderr", 300, 1)]
    row = await lease_row(database_url, "job_b")
    assert row is not None and row[0] > LONG_AGO and row[1] == 1


async def test_concurrent_batches_of_a_sessions_jobs_get_distinct_consecutive_seqs(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    jobs = {f"job_c{n}": "ses_c" for n in range(3)}
    headers = await claimed_and_held(client, database_url, tmp_path, jobs)

    async def ship(job: str) -> None:
        for seq in range(1, 9):
            answer = await client.post(f"{JOBS}/{job}/lines", headers=headers[job], json={
                "channel": "output", "seq": seq, "lines": [f"{job} {seq} {n}" for n in range(3)]})
            assert answer.json()["accepted"] is True, answer.text

    await asyncio.gather(*(ship(job) for job in jobs))
    stored = await stored_lines(database_url, "ses_c", "output")
    assert [seq for seq, _ in stored] == list(range(1, 3 * 8 * 3 + 1))
    for job in jobs:
        own = [line for _, line in stored if line.startswith(f"{job} ")]
        assert own == [f"{job} {seq} {n}" for seq in range(1, 9) for n in range(3)]


async def test_the_one_call_appends_as_the_statements_do_under_contention(
    database_url: str, conn: asyncpg.Connection
) -> None:
    pool = await create_pool(database_url, max_size=4)
    held = session_lines.Holder("0" * 64, datetime.now(UTC))
    try:
        assert await session_lines.append_once(conn, held, "job_none", "output", 1,
                                               session_lines.prepared(["x"])) is None
        assert await stored_lines(database_url, "ses_d", "output") == []

        async def ship(job: str) -> None:
            for seq in range(1, 11):
                async with pool.acquire() as own:
                    pieces = session_lines.prepared([f"{job} {seq}", f"{job} {seq}b"])
                    assert await session_lines.append_once(own, "ses_d", job, "output", seq,
                                                           pieces)

        await asyncio.gather(*(ship(f"job_d{n}") for n in range(4)))
    finally:
        await pool.close()
    assert [seq for seq, _ in await stored_lines(database_url, "ses_d", "output")] == \
        list(range(1, 81))
    assert not await session_lines.append_once(conn, "ses_d", "job_d0", "output", 10,
                                               session_lines.prepared(["again"]))
    with pytest.raises(InvalidTransition) as gap:
        await session_lines.append_once(conn, "ses_d", "job_d0", "output", 12,
                                        session_lines.prepared(["gap"]))
    assert gap.value.details == {"expectedSeq": 11}
    assert await session_lines.last_seq(conn, "ses_d", "output") == 80
    assert await conn.fetchval(
        "SELECT has_function_privilege('svc_app', 'session_lines_append(text, text, "
        "timestamptz, text, text, text, bigint, text[], integer[], integer[], bigint, "
        "bigint)', 'EXECUTE')"), "the service's role may call it"


async def test_the_batch_function_keeps_generic_plans_where_the_pools_force_custom_ones(
    conn: asyncpg.Connection, database_url: str
) -> None:
    """Migration 0025: the function's statements are planned once per connection even on the
    read pools, which force a custom plan for every other statement they run."""
    config = await conn.fetchval(
        "SELECT proconfig FROM pg_proc WHERE proname = 'session_lines_append'")
    assert config == ["plan_cache_mode=force_generic_plan"]
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        assert await pool.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
    finally:
        await pool.close()


async def test_the_heartbeat_function_keeps_generic_plans_and_the_service_may_run_it(
    conn: asyncpg.Connection
) -> None:
    """Migration 0026: the held-token renewal, granted to the service's role outright."""
    config = await conn.fetchval(
        "SELECT proconfig FROM pg_proc WHERE proname = 'runner_lease_renew_held'")
    assert config == ["plan_cache_mode=force_generic_plan"]
    for function in ("runner_lease_renew_held(text, text, timestamptz)",
                     "session_lines_append(text, text, timestamptz, text, text, text, bigint,"
                     " text[], integer[], integer[], bigint, bigint)"):
        assert await conn.fetchval("SELECT has_function_privilege('svc_app', $1, 'EXECUTE')",
                                   function)
