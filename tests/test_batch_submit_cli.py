"""``svc queue submit`` with several tasks (a JSON array, or JSON lines) against a real
``svc serve``: batches of at most 500, the ids printed in the order given, each item
idempotent by its own key."""

from __future__ import annotations

import json

import asyncpg
import httpx

from tests.support import task_body
from tests.test_cli import svc


async def _ledger_size(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM ledger"))
    finally:
        await conn.close()


def _titles(api: str, ids: list[str]) -> list[str]:
    return [httpx.get(f"{api}/api/v1/queue/tasks/{task_id}").json()["title"] for task_id in ids]


async def test_a_json_array_on_stdin_prints_the_ids_in_order(served_api: str) -> None:
    tasks = [task_body(title=f"array {n}") for n in range(3)]
    result = svc("queue", "submit", "--json-stdin", api=served_api, stdin=json.dumps(tasks))
    assert result.returncode == 0, result.stderr
    ids = result.stdout.split()
    assert len(ids) == 3 and all(task_id.startswith("tsk_") for task_id in ids)
    assert _titles(served_api, ids) == [f"array {n}" for n in range(3)]


async def test_json_lines_go_in_batches_of_500_and_a_rerun_replays_them(
        served_api: str, database_url: str) -> None:
    lines = "\n".join(json.dumps(task_body(title=f"line {n}")) for n in range(1001)) + "\n"
    before = await _ledger_size(database_url)
    first = svc("queue", "submit", "--json-file=-", "--idempotency-key", "nightly",
                api=served_api, stdin=lines)
    assert first.returncode == 0, first.stderr
    ids = first.stdout.split()
    assert len(ids) == len(set(ids)) == 1001
    assert await _ledger_size(database_url) == before + 1001
    assert _titles(served_api, [ids[0], ids[500], ids[1000]]) == [
        "line 0", "line 500", "line 1000"]
    again = svc("queue", "submit", "--json-file=-", "--idempotency-key", "nightly",
                api=served_api, stdin=lines)
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ids
    assert await _ledger_size(database_url) == before + 1001


async def test_a_bad_task_refuses_its_batch_and_is_named(served_api: str,
                                                         database_url: str) -> None:
    tasks = [task_body(), task_body(), task_body(title=""), task_body()]
    before = await _ledger_size(database_url)
    result = svc("queue", "submit", "--json-stdin", api=served_api, stdin=json.dumps(tasks))
    assert result.returncode == 1
    assert "refused at task 2 of the input" in result.stderr
    assert "error: invalid-request:" in result.stderr and result.stdout == ""
    assert await _ledger_size(database_url) == before
    empty = svc("queue", "submit", "--json-stdin", api=served_api, stdin="[]")
    assert empty.returncode == 1 and "no task" in empty.stderr


async def test_one_task_over_several_lines_is_still_one_submit(served_api: str) -> None:
    result = svc("queue", "submit", "--json-stdin", "--raw", api=served_api,
                 stdin=json.dumps(task_body(title="pretty"), indent=2))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["title"] == "pretty"
