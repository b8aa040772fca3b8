"""Batch submits in flight at once, from one writer (its batches overlap: each is decided
while the one ahead commits) and from two (two processes): keys repeated within a batch and
across batches, some stored before, some sent with another body. Whatever the interleaving,
each key is one task with one entry, every batch answers its own items or is refused whole at
an item that really conflicts, and replaying the ledger gives the live projections."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import intake
from ledger.database import create_pool
from ledger.errors import IdempotencyConflict
from ledger.ids import keyed_id
from ledger.task import SubmitTask
from ledger.writer import LedgerWriter, Outcome
from projections.store import plan_projection
from tests.support import replay_report, task_body

Batch = list[tuple[str, str]]
"""Each item's key and title (the body a key is stored with is told by its title)."""

ALL_KEYS = ("k1", "k2", "k3", "k4", "k5")
KEYS = st.sampled_from(ALL_KEYS)
TITLES = st.sampled_from(["a", "a", "a", "b"])  # mostly the same body: replays, some conflicts
BATCHES = st.lists(st.lists(st.tuples(KEYS, TITLES), min_size=1, max_size=8),
                   min_size=1, max_size=5)


@given(stored_first=st.lists(KEYS, max_size=3, unique=True), batches=BATCHES,
       two_writers=st.booleans())
@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_batches_in_flight_at_once_store_each_key_once_and_replay_equals_live(
        database_url: str, stored_first: list[str], batches: list[Batch],
        two_writers: bool) -> None:
    asyncio.run(_property(database_url, stored_first, batches, two_writers))


async def _property(url: str, stored_first: list[str], batches: list[Batch],
                    two_writers: bool) -> None:
    tenant = f"t{uuid.uuid4().hex[:12]}"  # fresh keys per example
    pools = [await create_pool(url, min_size=1, max_size=3, transactions_only=True)
             for _ in range(2 if two_writers else 1)]
    writers = [LedgerWriter(pool, plan_projection) for pool in pools]
    for writer in writers:
        await writer.start()

    def commands(batch: Batch) -> list[SubmitTask]:
        return [intake.submit_command(task_body(tenantId=tenant, title=title), actor="t",
                                      idempotency_key=key) for key, title in batch]

    try:
        if stored_first:  # replayed below, beside new keys
            await writers[0].execute_all(commands([(k, "a") for k in stored_first]), "t",
                                         atomic=True)
        sent = [commands(batch) for batch in batches]
        answers = await asyncio.gather(
            *(writers[n % len(writers)].execute_all(each, "t", atomic=True)
              for n, each in enumerate(sent)), return_exceptions=True)
        stored = await _stored(url, tenant)
    finally:
        for writer in writers:
            await writer.close()
        for pool in pools:
            await pool.close()
    for batch, each, answer in zip(batches, sent, answers, strict=True):
        _check_answer(batch, each, answer, stored)
    assert all(count == 1 for _, count in stored.values()), stored  # no twin, no second entry
    answered = {key for batch, answer in zip(batches, answers, strict=True)
                if isinstance(answer, list) for key, _ in batch}
    assert set(stored) == set(stored_first) | answered
    report = await replay_report(url)
    assert report.ok, report


def _check_answer(batch: Batch, sent: list[SubmitTask], answer: list[Outcome] | BaseException,
                  stored: dict[str, tuple[str, int]]) -> None:
    """A stored batch answers each item with its key's task, stored with the item's body; a
    refused one names an item whose body differs from its key's stored one or from an
    earlier item's of the same key."""
    if isinstance(answer, BaseException):
        assert isinstance(answer, IdempotencyConflict), answer
        index = answer.details["index"]
        assert isinstance(index, int)
        key, title = batch[index]
        earlier = {t for k, t in batch[:index] if k == key}
        assert (earlier - {title}) or (key in stored and stored[key][0] != title), (
            batch, index, stored)
        return
    assert [outcome.stream_id for outcome in answer] == [c.task_id for c in sent]
    for key, title in batch:
        assert stored[key][0] == title, (batch, stored)


async def _stored(url: str, tenant: str) -> dict[str, tuple[str, int]]:
    """Each stored key's title and how many ledger entries its task has."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT s.task_id, s.title, count(l.change_seq) AS n FROM task_summary s "
            "JOIN ledger l ON l.stream_id = s.task_id WHERE s.tenant_id = $1 "
            "GROUP BY s.task_id, s.title", tenant)
    finally:
        await conn.close()
    key_of = {keyed_id("tsk", tenant, key): key for key in ALL_KEYS}
    return {key_of[row["task_id"]]: (row["title"], row["n"]) for row in rows}
