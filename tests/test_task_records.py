"""Task records of SPEC 2.3 and 2.7: typed references, the run policy's providerId, the
task summary's statistic fields and the attempt's bounded output reference."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from ledger.intake import submit_command
from ledger.writer import LedgerWriter
from projections.store import plan_projection
from tests.support import post_changing_nothing, replay_report, task_body
from tests.test_dispatch import TASKS, dispatch, run_task, settle, submit

REFERENCES = [
    {"kind": "issue", "id": "42", "title": "The build is red"},
    {"kind": "change-request", "url": "https://code.example.org/r/pull/7"},
    {"kind": "repository", "url": "https://code.example.org/r.git"},
    {"kind": "commit", "id": "0123456789abcdef0123456789abcdef01234567"},
    {"kind": "document", "url": "https://docs.example.org/design", "id": "design-3"},
    {"kind": "external", "id": "ticket:OPS-9"},
]


async def test_typed_references_are_stored_as_sent(client: Any) -> None:
    response = await client.post(TASKS, json=task_body(references=REFERENCES))
    assert response.status_code == 201, response.text
    task_id = response.json()["taskId"]
    shown = (await client.get(f"{TASKS}/{task_id}")).json()
    assert shown["contract"]["references"] == REFERENCES


BAD_REFERENCES: list[tuple[str, Any, str]] = [
    ("neither url nor id", [{"kind": "issue", "title": "t"}], "needs a url or an id"),
    ("unknown kind", [{"kind": "ticket", "id": "1"}], "$.references[0].kind"),
    ("missing kind", [{"id": "1"}], "kind"),
    ("unknown field", [{"kind": "issue", "id": "1", "notes": "x"}], "notes"),
    ("empty id", [{"kind": "issue", "id": ""}], "$.references[0].id"),
    ("title too long", [{"kind": "issue", "id": "1", "title": "x" * 301}], "title"),
    ("not an object", ["issue 42"], "$.references[0]"),
    ("second one bad", [REFERENCES[0], {"kind": "commit"}], "$.references[1]"),
    ("too many", [REFERENCES[0]] * 65, "$.references"),
]


@pytest.mark.parametrize(("case", "references", "named"), BAD_REFERENCES,
                         ids=[c for c, _, _ in BAD_REFERENCES])
async def test_bad_references_are_refused_with_a_clear_error_and_change_nothing(
        client: Any, database_url: str, case: str, references: Any, named: str) -> None:
    response = await post_changing_nothing(client, database_url, TASKS,
                                           task_body(references=references), 400)
    error = response.json()["error"]
    assert error["code"] == "invalid-request", case
    assert named in error["message"], error


async def test_a_task_stored_with_free_form_references_stays_readable(
        client: Any, app_url: str, database_url: str) -> None:
    """Tasks submitted before references were typed hold any objects: shown as stored."""
    old = [{"a": 1}, {"kind": "bug", "link": "https://x.example.org/1"}]
    pool = await asyncpg.create_pool(app_url, min_size=1, max_size=2)
    writer = LedgerWriter(pool, plan_projection)
    await writer.start()
    try:
        command = submit_command(task_body(references=old), actor="api")
        await writer.execute(command, "api")
    finally:
        await writer.close()
        await pool.close()
    shown = await client.get(f"{TASKS}/{command.task_id}")
    assert shown.status_code == 200
    assert shown.json()["contract"]["references"] == old
    listed = (await client.get(TASKS)).json()["items"]
    assert [t["taskId"] for t in listed] == [command.task_id]
    assert (await replay_report(database_url)).ok


async def test_provider_id_is_accepted_and_carried_into_the_runner_job(client: Any) -> None:
    task_id = await submit(client, providerId="provider-a")
    shown = (await client.get(f"{TASKS}/{task_id}")).json()
    assert shown["contract"]["providerId"] == "provider-a"
    plan = (await client.post(f"{TASKS}/{task_id}/dispatch?dryRun=true", json={})).json()
    assert plan["plan"]["runnerJob"]["providerId"] == "provider-a"
    task = await dispatch(client, task_id)
    job = (await client.get(f"/api/v1/runs/{task['latestAttempt']['runId']}/runner-job")).json()
    assert job["plan"]["providerId"] == "provider-a"
    await settle(client, task_id)
    without = await submit(client)
    plan = (await client.post(f"{TASKS}/{without}/dispatch?dryRun=true", json={})).json()
    assert plan["plan"]["runnerJob"]["providerId"] is None
    bad = await client.post(TASKS, json=task_body(providerId="../other"))
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid-request"


async def test_statistic_fields_and_the_output_reference(
        client: Any, database_url: str) -> None:
    pending = (await client.get(f"{TASKS}/{await submit(client)}")).json()
    assert (pending["attemptCount"], pending["lastDurationMs"]) == (0, None)
    task_id, failed = await run_task(client, "exit: 1")
    assert failed["attemptCount"] == 1
    attempts = (await client.get(f"{TASKS}/{task_id}/attempts")).json()["items"]
    first = attempts[0]
    assert failed["lastDurationMs"] is not None
    assert abs(failed["lastDurationMs"] - first["durationMs"]) <= 1, "the same interval"
    session = first["sessionId"]
    assert first["outputRef"] == {"sessionId": session, "runnerJobId": first["runnerJobId"],
                                  "path": f"/api/v1/sessions/{session}/output"}
    output = await client.get(first["outputRef"]["path"])
    assert output.status_code == 200 and output.json()["items"], "the reference resolves"
    retried = await client.post(f"{TASKS}/{task_id}/retry",
                                json={"idempotencyKey": "k1", "reason": "again"})
    assert retried.status_code == 200, retried.text
    during = (await client.get(f"{TASKS}/{task_id}")).json()
    assert during["attemptCount"] == 2
    assert during["lastDurationMs"] == failed["lastDurationMs"], "the last ended attempt's"
    done = await settle(client, task_id)
    assert done["attemptCount"] == 2
    attempts = (await client.get(f"{TASKS}/{task_id}/attempts")).json()["items"]
    assert abs(done["lastDurationMs"] - attempts[1]["durationMs"]) <= 1
    assert (await replay_report(database_url)).ok
