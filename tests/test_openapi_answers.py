"""The answers' nested objects are documented with their shapes (``api.answer_shapes``), and
real answers of the app match the documented schemas: a task's contract and work-ready
summary, a runner job's plan and startup summary, dry runs, judge runs, health."""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema
import pytest

from runner_assembly.settings import RunnerSettings
from tests.support import task_body
from tests.test_dispatch import TASKS, settle

SCHEMA = "/api/v1/schema/openapi.json"


async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get(SCHEMA)
    assert response.status_code == 200
    return dict(response.json())


def validator(doc: dict[str, Any], name: str) -> jsonschema.Draft202012Validator:
    """A validator of the component ``name`` (its ``$ref``s resolved in ``doc``)."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
    return jsonschema.Draft202012Validator(schema)


def check(doc: dict[str, Any], name: str, value: Any) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}"
              for e in validator(doc, name).iter_errors(value)]
    assert errors == [], (name, errors)


def shape(doc: dict[str, Any], name: str, field: str) -> set[str]:
    """The component names a property refers to (directly, or as one of a union)."""
    text = str(doc["components"]["schemas"][name]["properties"][field])
    return {part.split("'")[0] for part in text.split("#/components/schemas/")[1:]}


async def test_no_answer_property_is_an_untyped_map(client: httpx.AsyncClient) -> None:
    doc = await document(client)
    expected = {("TaskDetail", "contract"): {"SubmitBody"},
                ("TaskDetail", "workReady"): {"WorkReady"},
                ("TaskDetail", "latestAttempt"): {"LatestAttempt"},
                ("Health", "workReady"): {"WorkReady"},
                ("RunnerJob", "plan"): {"RunnerJobPlan"},
                ("RunnerJob", "runnerStartup"): {"WorkReady"},
                ("RunnerJob", "assembly"): {"JsonObject"},
                ("DryRun", "plan"): {"DryRunPlan"},
                ("JudgeRun", "request"): {"JsonObject"},
                ("ErrorBody", "details"): set()}
    assert {key: shape(doc, *key) for key in expected} == expected
    untyped = [(name, field) for name, schema in doc["components"]["schemas"].items()
               for field, prop in schema.get("properties", {}).items()
               if '"additionalProperties": {}' in str(prop).replace("'", '"')]
    assert untyped == []


async def test_a_dry_run_is_told_apart_by_its_mutation_member(
        client: httpx.AsyncClient) -> None:
    doc = await document(client)
    dry = doc["components"]["schemas"]["DryRun"]
    assert dry["properties"]["mutation"]["const"] is False
    assert dry["additionalProperties"] is False and "mutation" in dry["required"]
    answers = [await client.post(TASKS, params={"dryRun": "true"}, json=task_body()),
               await client.post(f"{TASKS}/batch", params={"dryRun": "true"},
                                 json={"items": [{"idempotencyKey": "b1",
                                                  "task": task_body()}]})]
    created = await client.post(TASKS, json=task_body())
    task_id = created.json()["taskId"]
    answers += [await client.post(f"{TASKS}/{task_id}/dispatch", params={"dryRun": "true"}),
                await client.post(f"{TASKS}/{task_id}/cancel", params={"dryRun": "true"}),
                await client.post("/api/v1/sessions", params={"dryRun": "true"},
                                  json={"backendProfile": "profile-1"})]
    for answer in answers:
        assert answer.status_code == 200, answer.text
        check(doc, "DryRun", answer.json())
        with pytest.raises(jsonschema.ValidationError):
            validator(doc, "TaskDetail").validate(answer.json())
    with pytest.raises(jsonschema.ValidationError):
        validator(doc, "DryRun").validate(created.json())


async def test_real_answers_match_their_typed_schemas(
        client: httpx.AsyncClient, runner_settings: RunnerSettings) -> None:
    doc = await document(client)
    created = await client.post(TASKS, json=task_body(
        payload={"prompt": "say hello"}, metadata={"ticket": "OPS-1", "n": [1, {"a": None}]},
        references=[{"kind": "issue", "id": "42"}]))
    assert created.status_code == 201, created.text
    check(doc, "TaskDetail", created.json())
    task_id = created.json()["taskId"]
    dispatched = await client.post(f"{TASKS}/{task_id}/dispatch", json={})
    assert dispatched.json()["workReady"] is not None
    check(doc, "TaskDetail", dispatched.json())
    done = await settle(client, task_id)
    assert done["state"] == "completed"
    check(doc, "TaskDetail", (await client.get(f"{TASKS}/{task_id}")).json())
    run_id = done["latestAttempt"]["runId"]
    job = (await client.get(f"/api/v1/runs/{run_id}/runner-job")).json()
    assert job["plan"] and job["assembly"] and job["runnerStartup"], job
    check(doc, "RunnerJob", job)
    attempt_id = done["latestAttempt"]["attemptId"]
    judged = await client.post(f"{TASKS}/{task_id}/attempts/{attempt_id}/judge",
                               json={"judge": "ci", "request": {"k": [1, "x"]},
                                     "result": "pass"})
    assert judged.status_code == 201, judged.text
    check(doc, "JudgeRun", judged.json())
    check(doc, "AttemptList", (await client.get(f"{TASKS}/{task_id}/attempts")).json())
    check(doc, "Health", (await client.get("/api/v1/health")).json())
