"""``POST /api/v1/queue/tasks/batch`` through the real app (DESIGN 10): items answered in
order, 201 or 200, every item idempotent by its own key, all or nothing: a refused batch
names its item and leaves the ledger and every projection as they were."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger import intake
from ledger.database import create_pool
from ledger.errors import IdempotencyConflict
from ledger.writer import LedgerWriter
from projections import queries
from projections.store import plan_projection
from tests.support import replay_report, snapshot, task_body

TASKS = "/api/v1/queue/tasks"
BATCH = f"{TASKS}/batch"


def items(*pairs: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {"items": [{"idempotencyKey": key, "task": task} for key, task in pairs]}


async def _entries(url: str) -> list[tuple[int, str, int, str]]:
    conn = await asyncpg.connect(url)
    try:
        return [tuple(row) for row in await conn.fetch(
            "SELECT change_seq, stream_id, stream_version, event_type FROM ledger "
            "ORDER BY change_seq")]
    finally:
        await conn.close()


async def test_a_batch_answers_each_task_in_order_and_a_replay_answers_the_same(
        client: Any, database_url: str) -> None:
    sent = items(*((f"b-{n}", task_body(title=f"task {n}", priority=n)) for n in range(5)))
    created = await client.post(BATCH, json=sent)
    assert created.status_code == 201, created.text
    answered = created.json()["items"]
    assert [task["title"] for task in answered] == [f"task {n}" for n in range(5)]
    assert [task["priority"] for task in answered] == list(range(5))
    assert len({task["taskId"] for task in answered}) == 5
    for task in answered:  # the answer is the task as stored
        assert (await client.get(f"{TASKS}/{task['taskId']}")).json() == task
    entries = await _entries(database_url)
    assert [(stream, version) for _, stream, version, _ in entries] == [
        (task["taskId"], 1) for task in answered]  # one entry per item, in order
    before = await snapshot(database_url)
    replayed = await client.post(BATCH, json=sent)
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["items"] == answered  # replay equals live
    assert await snapshot(database_url) == before
    assert (await replay_report(database_url)).ok


async def test_a_batch_with_any_new_task_is_201_and_replays_are_answered_beside_it(
        client: Any, database_url: str) -> None:
    first = await client.post(TASKS, json=task_body(title="by header"),
                              headers={"Idempotency-Key": "shared"})
    assert first.status_code == 201
    mixed = await client.post(BATCH, json=items(("shared", task_body(title="by header")),
                                                ("fresh", task_body(title="new"))))
    assert mixed.status_code == 201, mixed.text
    shown = mixed.json()["items"]
    assert shown[0] == first.json()  # the header's key and an item's key are one key
    assert shown[1]["title"] == "new" and shown[1]["version"] == 1


async def test_a_key_twice_in_one_batch_is_one_task(client: Any, database_url: str) -> None:
    answer = await client.post(BATCH, json=items(("twice", task_body()), ("twice", task_body()),
                                                 ("other", task_body())))
    assert answer.status_code == 201, answer.text
    first, second, other = answer.json()["items"]
    assert first == second and other["taskId"] != first["taskId"]
    assert len(await _entries(database_url)) == 2


@pytest.mark.parametrize(("bad", "code"), [
    ({"title": ""}, "invalid-request"),
    ({"unknownField": 1}, "invalid-request"),
    ({"workspaceRef": {"repoUrl": "https://user@git.example.org/x"}}, "schema-invalid"),
    ({"metadata": {"dsn": "postgresql://app:CanarySecretValue0123456789abcdefXYZ@db/x"}},
     "credential-in-request"),
])
async def test_an_invalid_item_refuses_the_batch_and_names_its_index(
        client: Any, database_url: str, bad: dict[str, Any], code: str) -> None:
    before = await snapshot(database_url)
    sent = items(("a", task_body()), ("b", task_body()), ("c", task_body(**bad)),
                 ("d", task_body()))
    for dry in (False, True):
        refused = await client.post(BATCH, json=sent, params={"dryRun": "true"} if dry else {})
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == code and error["details"]["index"] == 2, error
        assert "CanarySecretValue" not in refused.text
    assert await snapshot(database_url) == before


@pytest.mark.parametrize("item", [
    {"task": task_body()},
    {"idempotencyKey": "", "task": task_body()},
    {"idempotencyKey": "k", "task": task_body(), "extra": 1},
    {"idempotencyKey": "k"},
    "not an object",
])
async def test_a_malformed_item_is_refused_with_its_index(client: Any, database_url: str,
                                                          item: Any) -> None:
    before = await snapshot(database_url)
    refused = await client.post(BATCH, json={"items": [
        {"idempotencyKey": "fine", "task": task_body()}, item]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["details"]["index"] == 1
    assert await snapshot(database_url) == before


async def test_a_key_used_with_another_body_is_a_conflict_naming_the_item(
        client: Any, database_url: str) -> None:
    stored = await client.post(BATCH, json=items(("taken", task_body(title="original"))))
    assert stored.status_code == 201
    before = await snapshot(database_url)
    for sent, index in ((items(("new-1", task_body()), ("taken", task_body(title="other"))), 1),
                        (items(("new-2", task_body()), ("dup", task_body(title="x")),
                               ("dup", task_body(title="y"))), 2)):
        for dry in (False, True):
            refused = await client.post(BATCH, json=sent,
                                        params={"dryRun": "true"} if dry else {})
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert error["code"] == "idempotency-conflict"
            assert error["details"]["index"] == index
    assert await snapshot(database_url) == before  # new-1, new-2, dup: none stored


@pytest.mark.parametrize("count", [0, 501])
async def test_an_empty_or_oversized_batch_is_refused(client: Any, database_url: str,
                                                      count: int) -> None:
    before = await snapshot(database_url)
    refused = await client.post(BATCH, json=items(*((f"k{n}", task_body())
                                                    for n in range(count))))
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "invalid-request"
    assert await snapshot(database_url) == before


async def test_five_hundred_items_are_one_batch(client: Any, database_url: str) -> None:
    answer = await client.post(BATCH, json=items(*((f"k{n}", task_body(title=f"t{n}"))
                                                   for n in range(500))))
    assert answer.status_code == 201, answer.text
    assert [task["title"] for task in answer.json()["items"]] == [f"t{n}" for n in range(500)]
    assert len(await _entries(database_url)) == 500


async def test_a_dry_run_plans_each_item_and_changes_nothing(client: Any,
                                                             database_url: str) -> None:
    await client.post(BATCH, json=items(("old", task_body())))
    before = await snapshot(database_url)
    planned = await client.post(BATCH, params={"dryRun": "true"}, json=items(
        ("old", task_body()), ("new", task_body()), ("new", task_body())))
    assert planned.status_code == 200, planned.text
    answer = planned.json()
    assert answer["mutation"] is False and answer["plan"]["command"] == "submit-batch"
    assert [plan["idempotentReplay"] for plan in answer["plan"]["items"]] == [
        True, False, True]
    assert [plan["events"] for plan in answer["plan"]["items"]] == [
        [], ["task-submitted"], []]
    assert await snapshot(database_url) == before


async def test_concurrent_batches_sharing_keys_store_each_key_once(
        client: Any, database_url: str) -> None:
    sent = items(*((f"race-{n}", task_body(title=f"r{n}")) for n in range(20)))
    answers = await asyncio.gather(*(client.post(BATCH, json=sent) for _ in range(6)))
    assert sorted(a.status_code for a in answers).count(201) >= 1
    assert all(a.status_code in (200, 201) for a in answers)
    assert all(a.json()["items"] == answers[0].json()["items"] for a in answers)
    assert len(await _entries(database_url)) == 20


KEYS = st.sampled_from(["k1", "k2", "k3", "k4"])
TITLES = st.sampled_from(["a", "b"])


@given(batches=st.lists(st.lists(st.tuples(KEYS, TITLES), min_size=1, max_size=6),
                        min_size=1, max_size=4))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_batches_with_repeated_keys_never_duplicate_a_task(
        database_url: str, batches: list[list[tuple[str, str]]]) -> None:
    """Against a model: a key keeps the first body it was stored with; a batch holding a
    key with another body is refused at that item's index, storing nothing; otherwise each
    key is one task, its entry written once, whatever the batches repeat."""
    asyncio.run(_property(database_url, batches))


async def _property(url: str, batches: list[list[tuple[str, str]]]) -> None:
    conn = await asyncpg.connect(url)
    tenant = f"t{uuid.uuid4().hex[:12]}"  # fresh keys per example
    pool = await create_pool(url, min_size=1, max_size=2, transactions_only=True)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    stored: dict[str, str] = {}
    try:
        for batch in batches:
            commands = [intake.submit_command(task_body(tenantId=tenant, title=title),
                                              actor="t", idempotency_key=key)
                        for key, title in batch]
            seen = dict(stored)
            conflict = None
            for index, (key, title) in enumerate(batch):
                if seen.setdefault(key, title) != title:
                    conflict = index
                    break
            head = await conn.fetchval("SELECT last_seq FROM ledger_head")
            if conflict is None:
                outcomes = await writer.execute_all(commands, "t", atomic=True)
                stored = seen
                assert [o.stream_id for o in outcomes] == [c.task_id for c in commands]
            else:
                with pytest.raises(IdempotencyConflict) as refused:
                    await writer.execute_all(commands, "t", atomic=True)
                assert refused.value.details["index"] == conflict
                assert await conn.fetchval("SELECT last_seq FROM ledger_head") == head
        rows = await conn.fetch(
            "SELECT l.stream_id, count(*) AS n, max(s.title) AS title FROM ledger l "
            "JOIN task_summary s ON s.task_id = l.stream_id WHERE s.tenant_id = $1 "
            "GROUP BY l.stream_id", tenant)
        assert len(rows) == len(stored) and all(row["n"] == 1 for row in rows)
        assert sorted(row["title"] for row in rows) == sorted(stored.values())
    finally:
        await writer.close()
        await pool.close()
        await conn.close()


async def test_a_batch_of_new_tasks_reads_nothing_back() -> None:
    """The replayed items' originals are read in one query; a batch with none asks nothing
    of the database (one round trip less for every batch of new tasks)."""
    class Refusing:
        async def fetch(self, *args: object) -> list[object]:
            raise AssertionError("no query expected for no ids")

    assert await queries.get_tasks(Refusing(), []) == {}
    with pytest.raises(AssertionError):
        await queries.get_tasks(Refusing(), ["tsk_0000000000000000000000000a"])
