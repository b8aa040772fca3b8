"""Contract tests of ``POST /api/v1/queue/tasks``: validation, dry-run, hashing, redaction."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import msgspec
import pytest

from tests.support import ADMIN_HEADER_LINE, replay_report, snapshot, task_body

TASKS = "/api/v1/queue/tasks"


async def test_submit_creates_a_pending_task_and_schedules_nothing(client: Any) -> None:
    response = await client.post(TASKS, json=task_body())
    assert response.status_code == 201
    task = response.json()
    assert task["taskId"].startswith("tsk_")
    assert task["state"] == "pending"
    assert task["version"] == 1
    assert task["changeSeq"] == 1
    assert task["latestAttempt"] is None
    assert task["sessionPath"] is None
    assert task["queue"] == "main" and task["lane"] == "default"
    assert task["updatedAt"].endswith("Z")
    stored = task["contract"]
    canonical = msgspec.json.encode(stored, order="sorted")
    assert task["payloadHash"] == hashlib.sha256(canonical).hexdigest()
    shown = (await client.get(f"{TASKS}/{task['taskId']}")).json()
    assert shown == task


async def test_submit_accepts_every_optional_field(client: Any) -> None:
    body = task_body(
        queue="main/fast", priority=7, backendProfile="profile-4",
        workspaceRef={"repoUrl": "https://example.org/r.git", "branch": "main"},
        resourceBundleRef={"kind": "gitbundle", "repoUrl": "https://example.org/b.git"},
        sessionRef=None,
        executionPolicy={"secretScope": {}}, references=[{"kind": "issue", "id": "42"}],
        metadata={"big": 10**30, "ratio": 0.5, "nested": {"ok": [1, 2]}},
    )
    response = await client.post(TASKS, json=body)
    assert response.status_code == 201, response.text
    task = response.json()
    assert (task["lane"], task["priority"], task["backendProfile"]) == ("fast", 7, "profile-4")
    assert task["contract"]["metadata"]["big"] == 10**30
    assert "sessionRef" not in task["contract"]
    assert (await client.get(f"{TASKS}/{task['taskId']}")).json() == task


async def test_submits_committed_in_one_batch_each_answer_their_stored_task(
        client: Any) -> None:
    bodies = [task_body(title=f"batch {n}", priority=n, queue=f"q{n % 3}/lane{n % 2}",
                        metadata={"n": n, "nested": {"list": [n, str(n)]}})
              for n in range(12)]
    answers = await asyncio.gather(*(client.post(TASKS, json=body) for body in bodies))
    assert [a.status_code for a in answers] == [201] * len(bodies)
    tasks = [a.json() for a in answers]
    assert len({t["changeSeq"] for t in tasks}) == len(bodies)
    for body, task in zip(bodies, tasks, strict=True):
        assert task["title"] == body["title"] and task["contract"]["metadata"] == body["metadata"]
        assert (await client.get(f"{TASKS}/{task['taskId']}")).json() == task


BAD_BODIES: list[tuple[str, Any]] = [
    ("missing tenantId", {k: v for k, v in task_body().items() if k != "tenantId"}),
    ("missing projectId", {k: v for k, v in task_body().items() if k != "projectId"}),
    ("missing queue", {k: v for k, v in task_body().items() if k != "queue"}),
    ("missing title", {k: v for k, v in task_body().items() if k != "title"}),
    ("missing payload", {k: v for k, v in task_body().items() if k != "payload"}),
    ("missing prompt", task_body(payload={})),
    ("unknown field", task_body(lane="x")),
    ("unknown payload field", task_body(payload={"prompt": "x", "image": "evil:latest"})),
    ("title wrong type", task_body(title=5)),
    ("priority wrong type", task_body(priority="high")),
    ("priority out of range", task_body(priority=101)),
    ("huge priority", task_body(priority=10**40)),
    ("unknown profile", task_body(backendProfile="profile-9")),
    ("empty title", task_body(title="")),
    ("oversized title", task_body(title="x" * 301)),
    ("oversized prompt", task_body(payload={"prompt": "x" * 65537})),
    ("queue with path traversal", task_body(queue="../etc")),
    ("queue with two slashes", task_body(queue="a/b/c")),
    ("NUL in title", task_body(title="a\x00b")),
    ("NUL in metadata key", task_body(metadata={"a\x00": 1})),
    ("deep metadata", task_body(metadata=json.loads('{"a":' * 40 + "1" + "}" * 40))),
    ("metadata not an object", task_body(metadata=[1, 2])),
    ("body is a list", [task_body()]),
    ("body is a string", "hello"),
]


@pytest.mark.parametrize(("case", "body"), BAD_BODIES, ids=[c for c, _ in BAD_BODIES])
async def test_invalid_bodies_are_refused_and_change_nothing(
    client: Any, database_url: str, case: str, body: Any
) -> None:
    before = await snapshot(database_url)
    response = await client.post(TASKS, json=body)
    assert response.status_code == 400, (case, response.text)
    error = response.json()["error"]
    assert error["code"] == "invalid-request"
    assert error["message"]
    assert isinstance(error["details"], dict)
    assert await snapshot(database_url) == before


RAW_BODIES = [
    ("malformed JSON", b'{"tenantId": '),
    ("empty body", b""),
    ("invalid UTF-8", b'{"tenantId": "\xff\xfe"}'),
    ("trailing garbage", b'{"a": 1} x'),
]


@pytest.mark.parametrize(("case", "raw"), RAW_BODIES, ids=[c for c, _ in RAW_BODIES])
async def test_unparseable_bodies_are_refused(
    client: Any, database_url: str, case: str, raw: bytes
) -> None:
    before = await snapshot(database_url)
    response = await client.post(TASKS, content=raw,
                                 headers={"content-type": "application/json"})
    assert response.status_code == 400, case
    assert response.json()["error"]["code"] == "invalid-request"
    assert await snapshot(database_url) == before


async def test_oversized_body_is_refused(client: Any, database_url: str) -> None:
    before = await snapshot(database_url)
    body = task_body(metadata={"blob": "x" * (2 * 1024 * 1024)})
    response = await client.post(TASKS, json=body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload-too-large"
    assert await snapshot(database_url) == before


async def test_an_announced_oversized_body_is_refused_before_it_arrives(
        client: Any, database_url: str) -> None:
    before = await snapshot(database_url)
    reader, writer = await asyncio.open_connection("127.0.0.1", client.base_url.port)
    writer.write(b"POST " + TASKS.encode() + b" HTTP/1.1\r\nHost: svc\r\n" + ADMIN_HEADER_LINE
                 + b"Content-Type: application/json\r\nContent-Length: 2097152\r\n\r\n{")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)  # not the body's 2 MiB
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    answer = json.loads(await reader.readexactly(length))
    writer.close()
    assert head.startswith(b"HTTP/1.1 413")
    assert answer["error"]["code"] == "payload-too-large"
    assert await snapshot(database_url) == before


async def test_a_body_sent_in_pieces_is_read_whole(client: Any) -> None:
    raw = json.dumps(task_body(title="in pieces")).encode()

    async def pieces() -> Any:
        for start in range(0, len(raw), 16):
            yield raw[start:start + 16]
            await asyncio.sleep(0.001)

    response = await client.post(TASKS, content=pieces(),
                                 headers={"content-type": "application/json"})
    assert response.status_code == 201, response.text
    assert response.json()["contract"]["title"] == "in pieces"


async def test_submit_dry_run_plans_and_changes_nothing(client: Any, database_url: str) -> None:
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}?dryRun=true", json=task_body(queue="main/fast"))
    assert response.status_code == 200
    answer = response.json()
    assert answer["mutation"] is False
    plan = answer["plan"]
    assert plan["command"] == "submit"
    assert plan["events"] == ["task-submitted"]
    assert plan["stateAfter"] == "pending" and plan["versionAfter"] == 1
    assert (plan["queue"], plan["lane"]) == ("main", "fast")
    assert len(plan["payloadHash"]) == 64
    assert await snapshot(database_url) == before


async def test_dry_run_of_an_invalid_body_is_still_refused(client: Any) -> None:
    response = await client.post(f"{TASKS}?dryRun=true", json=task_body(title=""))
    assert response.status_code == 400


async def test_secret_shaped_values_never_reach_the_ledger_or_responses(
    client: Any, database_url: str
) -> None:
    """Issue 13: a credential is refused at intake (never stored, never echoed); nothing
    else is rewritten, so the rest of a contract is stored as sent."""
    canary = "CanarySecretValue0123456789abcdefXYZ"
    before = await snapshot(database_url)
    refused = await client.post(TASKS, json=task_body(workspaceRef={
        "repoUrl": f"https://{canary}@git.example.org/y.git"}))
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "schema-invalid"
    assert canary not in refused.text, "a credential in a repository URL is refused unechoed"
    for fields in ({"payload": {"prompt": f"clone https://bot:{canary}@git.example.org/x.git"}},
                   {"metadata": {"dsn": f"postgresql://app:{canary}@db:5432/x"}}):
        response = await client.post(TASKS, json=task_body(**fields))
        assert response.status_code == 400
        assert response.json()["error"]["code"] == "credential-in-request"
        assert canary not in response.text
    listed = await client.get(TASKS)
    assert canary not in listed.text
    assert await snapshot(database_url) == before
    response = await client.post(TASKS, json=task_body(
        payload={"prompt": "clone https://git.example.org/x.git"}))
    assert response.status_code == 201
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        dump = await conn.fetchval(
            "SELECT string_agg(payload::text, '\n') FROM ledger") or ""
        projected = await conn.fetchval(
            "SELECT string_agg(contract::text, '\n') FROM task_contract") or ""
    finally:
        await conn.close()
    assert canary not in dump
    assert canary not in projected
    assert "git.example.org" in dump  # the rest of the value survives


async def test_an_idempotency_key_answers_the_original_task(
    client: Any, database_url: str
) -> None:
    """DESIGN 10: the same key and body → the original task (200, Idempotent-Replayed);
    another body → 409 idempotency-conflict; keys are per tenant; the dry run honours them."""
    key = {"Idempotency-Key": "submit-1"}
    first = await client.post(TASKS, json=task_body(), headers=key)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    task = first.json()
    again = await client.post(TASKS, json=task_body(), headers=key)
    assert again.status_code == 200, again.text
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == task
    before = await snapshot(database_url)
    dry = await client.post(f"{TASKS}?dryRun=true", json=task_body(), headers=key)
    assert dry.status_code == 200 and dry.headers["idempotent-replayed"] == "true"
    plan = dry.json()["plan"]
    assert (plan["taskId"], plan["events"], plan["idempotentReplay"]) == \
        (task["taskId"], [], True)
    other = task_body(title="Another title")
    for url in (TASKS, f"{TASKS}?dryRun=true"):
        conflict = await client.post(url, json=other, headers=key)
        assert conflict.status_code == 409, conflict.text
        assert conflict.json()["error"]["code"] == "idempotency-conflict"
    assert await snapshot(database_url) == before
    elsewhere = await client.post(TASKS, json=task_body(tenantId="globex"), headers=key)
    assert elsewhere.status_code == 201, "keys are per tenant"
    assert elsewhere.json()["taskId"] != task["taskId"]
    unkeyed = [await client.post(TASKS, json=task_body()) for _ in range(2)]
    assert [r.status_code for r in unkeyed] == [201, 201], "without a key every submit is new"
    listed = (await client.get(f"{TASKS}?limit=500")).json()["items"]
    assert len(listed) == 4
    assert (await replay_report(database_url)).ok


@pytest.mark.parametrize("key", ["", "a b", "x" * 129, "a/b"])
async def test_a_malformed_idempotency_key_is_refused(client: Any, key: str) -> None:
    response = await client.post(TASKS, json=task_body(), headers={"Idempotency-Key": key})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid-request"


async def test_concurrent_submits_under_one_key_make_one_task(
    client: Any, database_url: str
) -> None:
    """Many submits racing under one key: one 201, the rest replay it; never a twin."""
    key = {"Idempotency-Key": "race"}
    answers = await asyncio.gather(*(client.post(TASKS, json=task_body(), headers=key)
                                     for _ in range(12)))
    assert sorted(r.status_code for r in answers) == [200] * 11 + [201]
    assert len({r.json()["taskId"] for r in answers}) == 1
    assert len((await client.get(TASKS)).json()["items"]) == 1
