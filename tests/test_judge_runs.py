"""Judge run records (SPEC 2.3, 4.3 rule 6.10): a verdict on an ended attempt, recorded
through the ledger, shown with the attempts, replayable, and never a retry."""

from __future__ import annotations

from typing import Any

import asyncpg
import pytest

from runner_assembly.settings import RunnerSettings
from tests.support import post_changing_nothing, replay_report, snapshot
from tests.test_dispatch import TASKS, dispatch, run_task, runner_paused, submit

VERDICT = {"judge": "reviewer", "request": {"check": "the tests pass", "attempt": 0},
           "result": "fail", "failureKind": "tests-failed", "retrySuggested": True,
           "retryReason": "flaky network", "summary": "2 of 40 tests failed"}


def judge_url(task_id: str, attempt_id: str) -> str:
    return f"{TASKS}/{task_id}/attempts/{attempt_id}/judge"


async def ledger_size(url: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM ledger"))
    finally:
        await conn.close()


async def test_a_verdict_is_recorded_shown_and_never_retries(
        client: Any, database_url: str) -> None:
    task_id, failed = await run_task(client, "exit: 2")
    assert failed["state"] == "failed"
    attempt_id = failed["latestAttempt"]["attemptId"]
    response = await client.post(judge_url(task_id, attempt_id),
                                 json={**VERDICT, "judgeId": "jdg_review_1"})
    assert response.status_code == 201, response.text
    record = response.json()
    assert {k: record[k] for k in VERDICT} == VERDICT, "stored and answered as sent"
    assert (record["taskId"], record["attemptId"], record["judgeId"]) == (
        task_id, attempt_id, "jdg_review_1")

    after = (await client.get(f"{TASKS}/{task_id}")).json()
    assert after["state"] == "failed", "a suggested retry is not carried out"
    assert after["latestAttempt"] == failed["latestAttempt"]
    assert after["attemptCount"] == 1 and after["version"] == failed["version"] + 1
    attempts = (await client.get(f"{TASKS}/{task_id}/attempts")).json()["items"]
    assert len(attempts) == 1 and attempts[0]["judgeRuns"] == [record]

    size = await ledger_size(database_url)
    again = await client.post(judge_url(task_id, attempt_id),
                              json={**VERDICT, "judgeId": "jdg_review_1"})
    assert (again.status_code, again.json()) == (200, record)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert await ledger_size(database_url) == size
    conflict = await post_changing_nothing(
        client, database_url, judge_url(task_id, attempt_id),
        {**VERDICT, "judgeId": "jdg_review_1", "result": "pass"}, 409)
    assert conflict.json()["error"]["code"] == "idempotency-conflict"

    second = await client.post(judge_url(task_id, attempt_id),
                               json={"judge": "ci", "request": {}, "result": "pass"})
    assert second.status_code == 201
    assert second.json()["judgeId"].startswith("jdg_")
    assert second.json()["retrySuggested"] is False and second.json()["failureKind"] is None
    attempts = (await client.get(f"{TASKS}/{task_id}/attempts")).json()["items"]
    assert [j["judge"] for j in attempts[0]["judgeRuns"]] == ["reviewer", "ci"]
    report = await replay_report(database_url)
    assert report.ok, report


async def test_a_dry_run_plans_and_changes_nothing(client: Any, database_url: str) -> None:
    task_id, done = await run_task(client, "say hello")
    attempt_id = done["latestAttempt"]["attemptId"]
    before = await snapshot(database_url)
    response = await client.post(judge_url(task_id, attempt_id) + "?dryRun=true", json=VERDICT)
    assert response.status_code == 200
    plan = response.json()
    assert plan["mutation"] is False
    assert plan["plan"]["events"] == ["task-judge-recorded"]
    assert plan["plan"]["stateBefore"] == plan["plan"]["stateAfter"] == "completed"
    assert await snapshot(database_url) == before
    assert (await client.get(f"{TASKS}/{task_id}/attempts")).json()["items"][0][
        "judgeRuns"] == []


BAD_VERDICTS: list[tuple[str, Any]] = [
    ("unknown field", {**VERDICT, "retry": True}),
    ("missing judge", {k: v for k, v in VERDICT.items() if k != "judge"}),
    ("missing request", {k: v for k, v in VERDICT.items() if k != "request"}),
    ("missing result", {k: v for k, v in VERDICT.items() if k != "result"}),
    ("bad result", {**VERDICT, "result": "maybe"}),
    ("request not an object", {**VERDICT, "request": "check it"}),
    ("bad failure kind", {**VERDICT, "failureKind": "Tests Failed"}),
    ("retrySuggested not a bool", {**VERDICT, "retrySuggested": "yes"}),
    ("empty reason", {**VERDICT, "retryReason": ""}),
    ("bad judgeId", {**VERDICT, "judgeId": "../x"}),
    ("not an object", [VERDICT]),
]


@pytest.mark.parametrize(("case", "body"), BAD_VERDICTS, ids=[c for c, _ in BAD_VERDICTS])
async def test_bad_verdicts_are_refused_and_change_nothing(
        client: Any, database_url: str, case: str, body: Any) -> None:
    task_id = await submit(client)
    response = await post_changing_nothing(client, database_url,
                                           judge_url(task_id, "att_x"), body, 400)
    assert response.json()["error"]["code"] == "invalid-request", case


async def test_only_an_ended_attempt_of_the_task_is_judged(
        client: Any, database_url: str, runner_settings: RunnerSettings) -> None:
    task_id = await submit(client, "sleep: 30")
    running = await dispatch(client, task_id)
    attempt_id = running["latestAttempt"]["attemptId"]
    async with runner_paused(runner_settings):
        await _refusals(client, database_url, task_id, attempt_id)
    assert (await client.post(f"{TASKS}/{task_id}/cancel", json={})).status_code == 200
    assert (await client.post(judge_url(task_id, attempt_id), json=VERDICT)).status_code == 201


async def _refusals(client: Any, database_url: str, task_id: str, attempt_id: str) -> None:
    refused = await post_changing_nothing(client, database_url,
                                          judge_url(task_id, attempt_id), VERDICT, 409)
    assert refused.json()["error"]["code"] == "invalid-transition"
    assert "not ended" in refused.json()["error"]["message"]
    missing = await post_changing_nothing(client, database_url,
                                          judge_url(task_id, "att_nope"), VERDICT, 404)
    assert missing.json()["error"]["code"] == "not-found"
    unknown_task = await post_changing_nothing(client, database_url,
                                               judge_url("tsk_nope", attempt_id), VERDICT, 404)
    assert unknown_task.json()["error"]["code"] == "not-found"
