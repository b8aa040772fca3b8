"""The OpenAPI document as a client generator reads it: readable, unique operation ids,
camelCase path parameters, a followable ``Location`` on every 201, typed error codes and
real examples."""

from __future__ import annotations

import re
from typing import Any

import httpx
import jsonschema

from api.error_examples import EXAMPLES
from api.errors import ERROR_CODES, STATUS_BY_CODE
from api.openapi import OPERATION_ID_PATTERN
from runner_assembly.settings import RunnerSettings
from tests.support import task_body, write_profile_secret
from tests.test_sessions import wait_idle

Client = httpx.AsyncClient
SCHEMA = "/api/v1/schema/openapi.json"
METHODS = ("get", "post", "put", "patch", "delete")


async def document(client: Client) -> dict[str, Any]:
    response = await client.get(SCHEMA)
    assert response.status_code == 200
    return dict(response.json())


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every (method, path, operation) of the document."""
    return [(method, path, operation) for path, item in doc["paths"].items()
            for method, operation in item.items() if method in METHODS]


async def test_every_operation_id_is_unique_camel_case(client: Client) -> None:
    listed = operations(await document(client))
    assert len(listed) >= 30
    ids = [operation.get("operationId") for _, _, operation in listed]
    for (method, path, _), name in zip(listed, ids, strict=True):
        assert isinstance(name, str) and re.fullmatch(OPERATION_ID_PATTERN, name), \
            (method, path, name)
    assert len(set(ids)) == len(ids), sorted(ids)


async def test_the_core_operations_have_their_readable_ids(client: Client) -> None:
    found = {(method, path): operation["operationId"]
             for method, path, operation in operations(await document(client))}
    tasks = "/api/v1/queue/tasks"
    task = f"{tasks}/{{taskId}}"
    sessions = "/api/v1/sessions"
    expected = {
        ("post", tasks): "submitTask", ("post", f"{tasks}/batch"): "submitTaskBatch",
        ("get", tasks): "listTasks", ("get", task): "showTask",
        ("post", f"{task}/cancel"): "cancelTask", ("post", f"{task}/dispatch"): "dispatchTask",
        ("post", f"{task}/refresh"): "refreshTask", ("post", f"{task}/retry"): "retryTask",
        ("get", f"{task}/attempts"): "listAttempts",
        ("post", f"{task}/attempts/{{attemptId}}/judge"): "judgeAttempt",
        ("post", f"{task}/read"): "markTaskRead",
        ("get", "/api/v1/queue/stats"): "queueStats",
        ("get", "/api/v1/queue/commander"): "commanderView",
        ("post", sessions): "createSession", ("get", sessions): "listSessions",
        ("get", f"{sessions}/{{sessionId}}"): "showSession",
        ("get", f"{sessions}/{{sessionId}}/output"): "sessionOutput",
        ("get", f"{sessions}/{{sessionId}}/trace"): "sessionTrace",
    }
    assert {key: found.get(key) for key in expected} == expected


async def test_path_parameters_are_camel_case_and_name_the_template(client: Client) -> None:
    """Each ``{name}`` of a path is camelCase and is the name of exactly one of its
    operation's path parameters (a generator binds them by name)."""
    listed = operations(await document(client))
    templated = [(path, operation) for _, path, operation in listed if "{" in path]
    assert len(templated) >= 20
    for path, operation in templated:
        names = re.findall(r"\{([^}]+)\}", path)
        declared = [p["name"] for p in operation["parameters"] if p["in"] == "path"]
        assert sorted(names) == sorted(declared), path
        for name in names:
            assert re.fullmatch(r"[a-z]+(?:[A-Z][a-z]*)*", name), (path, name)


async def test_a_url_filled_from_the_template_reaches_the_resource(client: Client) -> None:
    """The URLs did not change: a template filled by its camelCase names answers."""
    paths = (await document(client))["paths"]
    created = await client.post("/api/v1/queue/tasks", json=task_body(title="templated"))
    assert created.status_code == 201, created.text
    task_id = created.json()["taskId"]
    for template in ("/api/v1/queue/tasks/{taskId}", "/api/v1/queue/tasks/{taskId}/attempts"):
        assert "get" in paths[template]
        shown = await client.get(template.format(taskId=task_id))
        assert shown.status_code == 200, (template, shown.text)


LOCATED = {"submitTask": "/api/v1/queue/tasks/{taskId}",
           "createSession": "/api/v1/sessions/{sessionId}",
           "addCommand": "/api/v1/sessions/{sessionId}",
           "createKey": "/api/v1/auth/keys/{keyId}"}
"""Each operation answering 201 with a ``Location``, and the resource it names. The batch
submit (many tasks) and a judge's verdict (no resource of its own) name none."""


async def test_every_201_documents_its_location(client: Client) -> None:
    doc = await document(client)
    documented = {}
    for _, _, operation in operations(doc):
        created = operation["responses"].get("201")
        if created is None:
            continue
        header = created.get("headers", {}).get("Location")
        if header is not None:
            assert header["required"] is True and header["schema"]["type"] == "string"
            template = header["description"].rsplit(" ", 1)[1]
            assert "get" in doc["paths"][template], template
            documented[operation["operationId"]] = template
        assert "Location" not in operation["responses"].get("200", {}).get("headers", {})
    assert documented == LOCATED


async def follow(client: Client, created: httpx.Response, field: str) -> dict[str, Any]:
    """The resource the 201's ``Location`` names: 200, the same id as the answer."""
    assert created.status_code == 201, created.text
    location = created.headers["location"]
    assert location.startswith("/api/v1/") and created.json()[field] in location
    shown = await client.get(location)
    assert shown.status_code == 200, (location, shown.text)
    assert shown.json()[field] == created.json()[field]
    return dict(shown.json())


async def test_location_of_a_submitted_task_shows_it(client: Client) -> None:
    created = await client.post("/api/v1/queue/tasks", json=task_body(title="located"))
    shown = await follow(client, created, "taskId")
    assert shown["title"] == "located"
    assert created.headers["location"] == f"/api/v1/queue/tasks/{created.json()['taskId']}"
    replay = await client.post("/api/v1/queue/tasks", json=task_body(title="twice"),
                               headers={"Idempotency-Key": "k1"})
    again = await client.post("/api/v1/queue/tasks", json=task_body(title="twice"),
                              headers={"Idempotency-Key": "k1"})
    assert (replay.status_code, again.status_code) == (201, 200)
    assert "location" in replay.headers and "location" not in again.headers
    dry = await client.post("/api/v1/queue/tasks", params={"dryRun": "true"}, json=task_body())
    assert dry.status_code == 200 and "location" not in dry.headers


async def test_location_of_a_created_key_shows_it_without_the_key(client: Client) -> None:
    created = await client.post("/api/v1/auth/keys",
                                json={"tenant": "acme", "roles": ["submitter"]})
    shown = await follow(client, created, "keyId")
    assert "key" not in shown and shown["roles"] == ["submitter"]
    missing = await client.get("/api/v1/auth/keys/key_none")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not-found"


async def test_location_of_a_session_and_of_its_command_shows_the_session(
        client: Client, runner_settings: RunnerSettings) -> None:
    write_profile_secret(runner_settings.data_dir, "profile-3")
    created = await client.post("/api/v1/sessions", json={"backendProfile": "profile-3"})
    session = await follow(client, created, "sessionId")
    command = await client.post(f"/api/v1/runs/{session['runId']}/commands",
                                json={"payload": {"prompt": "hello"}})
    assert (await follow(client, command, "sessionId"))["sessionId"] == session["sessionId"]
    await wait_idle(client, session["sessionId"])


def envelope_validator(doc: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """A validator of the documented error envelope (its ``$ref``s resolved in ``doc``)."""
    schema = {"$ref": "#/components/schemas/ErrorEnvelope", "components": doc["components"]}
    return jsonschema.Draft202012Validator(schema)


async def test_the_error_code_is_the_service_s_enum(client: Client) -> None:
    doc = await document(client)
    code = doc["components"]["schemas"]["ErrorBody"]["properties"]["code"]
    assert code["type"] == "string" and set(code["enum"]) == ERROR_CODES
    assert set(STATUS_BY_CODE) <= ERROR_CODES and "runner-lost" in ERROR_CODES
    assert set(EXAMPLES) == set(STATUS_BY_CODE), "every code of the table has an example"
    assert "examples" not in doc["components"]["schemas"]["ErrorEnvelope"]


async def test_each_error_status_shows_a_real_example_of_each_of_its_codes(
        client: Client) -> None:
    doc = await document(client)
    valid = envelope_validator(doc)
    for method, path, operation in operations(doc):
        for status, answer in operation["responses"].items():
            if not status.startswith(("4", "5")):
                continue
            examples = answer["content"]["application/json"]["examples"]
            codes = {code for code, wanted in STATUS_BY_CODE.items() if str(wanted) == status}
            assert set(examples) == codes, (method, path, status)
            for code, example in examples.items():
                value = example["value"]
                valid.validate(value)
                assert value["error"]["code"] == code
                assert re.search(r"[a-z]+ [a-z]+", value["error"]["message"]), value


async def test_real_error_answers_match_the_documented_envelope(client: Client) -> None:
    valid = envelope_validator(await document(client))
    answers = [await client.get("/api/v1/queue/tasks/tsk_none"),
               await client.get("/api/v1/queue/tasks", params={"cursor": "x1"}),
               await client.delete("/api/v1/queue/tasks"),
               await client.post("/api/v1/queue/tasks", json={"title": 1})]
    assert [a.status_code for a in answers] == [404, 400, 405, 400]
    for answer in answers:
        valid.validate(answer.json())
        assert STATUS_BY_CODE[answer.json()["error"]["code"]] == answer.status_code
