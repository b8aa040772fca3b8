"""Integrity against a privileged attacker and a corrupt ledger (DESIGN 8): the service's role
cannot rewrite history, an anchor detects a rewrite by the owner, and an undecodable entry is
named by its changeSeq instead of crashing replay or commands."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import pytest

from ledger.hashing import entry_hash
from tests.support import snapshot, task_body
from tests.test_cli import svc


async def _submit(client: Any, title: str) -> str:
    response = await client.post("/api/v1/queue/tasks", json=task_body(title=title))
    assert response.status_code == 201, response.text
    return str(response.json()["taskId"])


@pytest.mark.parametrize("statement", [
    "UPDATE ledger SET actor = 'mallory'",
    "DELETE FROM ledger",
    "TRUNCATE ledger",
    "ALTER TABLE ledger DISABLE TRIGGER ALL",
    "DROP TRIGGER ledger_no_update_delete ON ledger",
    "UPDATE schema_migrations SET name = 'x'",
    "INSERT INTO ledger_head (id, last_seq, last_hash) VALUES (2, 0, '\\x00')",
])
async def test_the_service_role_cannot_rewrite_history(client: Any, app_url: str,
                                                       database_url: str,
                                                       statement: str) -> None:
    await _submit(client, "one")
    before = await snapshot(database_url)
    conn = await asyncpg.connect(app_url)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(statement)
    finally:
        await conn.close()
    assert await snapshot(database_url) == before


async def _rewrite_payload(owner_url: str, change_seq: int, payload: str, *,
                           rechain: bool) -> None:
    """What an owner with full rights could do: edit an entry, optionally recompute every hash
    after it and the head, so that the chain alone verifies again."""
    conn = await asyncpg.connect(owner_url)
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE ledger DISABLE TRIGGER ALL")
            await conn.execute("UPDATE ledger SET payload = $2::json WHERE change_seq = $1",
                               change_seq, payload)
            if rechain:
                rows = await conn.fetch("SELECT * FROM ledger WHERE change_seq >= $1 "
                                        "ORDER BY change_seq", change_seq)
                prev = bytes(rows[0]["prev_hash"])
                for row in rows:
                    digest = entry_hash(
                        prev, change_seq=row["change_seq"], stream_type=row["stream_type"],
                        stream_id=row["stream_id"], stream_version=row["stream_version"],
                        event_type=row["event_type"], actor=row["actor"],
                        recorded_at=row["recorded_at"], payload=row["payload"].encode())
                    await conn.execute("UPDATE ledger SET prev_hash = $2, hash = $3 "
                                       "WHERE change_seq = $1", row["change_seq"], prev, digest)
                    prev = digest
                await conn.execute("UPDATE ledger_head SET last_hash = $1", prev)
            await conn.execute("ALTER TABLE ledger ENABLE TRIGGER ALL")
    finally:
        await conn.close()


async def test_an_anchor_detects_a_history_rewritten_by_the_owner(
        client: Any, app_url: str, database_url: str) -> None:
    first = await _submit(client, "the original title")
    await _submit(client, "two")
    env = {"SVC_DATABASE_URL": app_url}
    anchored = svc("ledger", "anchor", env=env)
    assert anchored.returncode == 0, anchored.stderr
    anchor = anchored.stdout.strip()
    assert anchor.startswith("2:") and len(anchor) == 2 + 64
    assert svc("ledger", "replay", "--verify", "--anchor", anchor, env=env).returncode == 0
    await _submit(client, "after the anchor")

    conn = await asyncpg.connect(database_url)
    try:
        payload = await conn.fetchval("SELECT payload::text FROM ledger WHERE change_seq = 1")
    finally:
        await conn.close()
    assert "the original title" in payload and first
    await _rewrite_payload(database_url, 1, payload.replace("the original title", "forged"),
                           rechain=True)
    assert svc("ledger", "replay", env=env).returncode == 0  # projections follow the forgery
    plain = svc("ledger", "replay", "--verify", env=env)
    assert plain.returncode == 0 and "hash chain: ok" in plain.stdout  # the chain alone agrees
    caught = svc("ledger", "replay", "--verify", "--anchor", anchor, env=env)
    assert caught.returncode == 1
    assert "anchor: anchor 2: the history up to it was rewritten" in caught.stdout

    later = svc("ledger", "anchor", env=env).stdout.strip()
    assert later.startswith("3:") and later != anchor
    bad = svc("ledger", "replay", "--verify", "--anchor", "2:nothex", env=env)
    assert bad.returncode == 1 and "error: invalid-request: an anchor is SEQ:HASH" in bad.stderr


async def test_a_corrupt_entry_is_named_by_its_change_seq(client: Any, app_url: str,
                                                          database_url: str) -> None:
    task_id = await _submit(client, "to be corrupted")
    await _submit(client, "healthy")
    await _rewrite_payload(database_url, 1, '{"type": "task-submitted", "bogus": true}',
                           rechain=False)
    result = svc("ledger", "replay", "--verify", env={"SVC_DATABASE_URL": app_url})
    assert result.returncode == 1
    assert "error: ledger-corrupt: changeSeq 1: undecodable" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout

    before = await snapshot(database_url)
    cancel = await client.post(f"/api/v1/queue/tasks/{task_id}/cancel", json={})
    assert cancel.status_code == 503
    error = cancel.json()["error"]
    assert error["code"] == "ledger-corrupt" and error["message"].startswith("changeSeq 1:")
    assert error["details"] == {"changeSeq": 1}
    assert await snapshot(database_url) == before
    healthy = await client.get("/api/v1/queue/tasks")
    assert healthy.status_code == 200


TRICKY = ['quote " backslash \\ slash /', "line\u2028separator\u2029and\ttab\nnewline",
          "\U0001f600 astral, e\u0301 decomposed, \u00e9 composed", 'literal \\u0041 escape',
          "\x7f\x01 controls", "</script><!--"]


async def test_every_text_is_stored_as_sent_and_the_chain_verifies(client: Any,
                                                                   app_url: str) -> None:
    """The writer sends entries and projection rows as JSON: what a caller sent comes back
    byte for byte (title and payload, from the projection and from the ledger) and the hash
    chain over the stored payloads verifies."""
    for text in TRICKY:
        body = task_body(title=text, payload={"prompt": text})
        created = await client.post("/api/v1/queue/tasks", json=body)
        assert created.status_code == 201, created.text
        task = (await client.get(f"/api/v1/queue/tasks/{created.json()['taskId']}")).json()
        assert task["title"] == text
        assert task["contract"]["payload"]["prompt"] == text
    conn = await asyncpg.connect(app_url)
    try:
        stored = [json.loads(row["payload"])["contract"]["payload"] for row in await conn.fetch(
            "SELECT payload::text AS payload FROM ledger WHERE event_type = 'task-submitted' "
            "ORDER BY change_seq")]
    finally:
        await conn.close()
    assert [entry["prompt"] for entry in stored] == TRICKY  # as the ledger holds it
    verified = svc("ledger", "replay", "--verify", env={"SVC_DATABASE_URL": app_url})
    assert verified.returncode == 0 and "hash chain: ok" in verified.stdout, verified.stdout
