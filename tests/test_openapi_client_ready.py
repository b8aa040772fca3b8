"""The OpenAPI document as a client generator reads it: readable, unique operation ids,
camelCase path parameters, a followable ``Location`` on every 201, typed error codes and
real examples."""

from __future__ import annotations

import re
from typing import Any

import httpx

from api.openapi import OPERATION_ID_PATTERN
from tests.support import task_body

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
