"""The OpenAPI document against the code: every body, bound, status and header it states is
what the real app does; the docs page renders from the app's own files."""

from __future__ import annotations

import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from litestar.routes import HTTPRoute
from openapi_spec_validator import validate as validate_openapi

from api import examples
from api.app import create_app
from api.docs_ui import ASSETS, assets_dir
from api.openapi import document_path
from api.settings import ServiceSettings
from ledger.errors import DomainError
from projections.queries import CURSOR_PATTERN
from runner_assembly.assembly import model
from tests.support import task_body

Client = httpx.AsyncClient
SCHEMA = "/api/v1/schema/openapi.json"


async def document(client: Client) -> dict[str, Any]:
    response = await client.get(SCHEMA)
    assert response.status_code == 200
    return dict(response.json())


def concrete(path: str) -> str:
    """A documented path with ids that name nothing."""
    return (path.replace("{taskId}", "tsk_none").replace("{runId}", "run_none")
            .replace("{sessionId}", "ses_none").replace("{attemptId}", "att_none")
            .replace("{runnerJobId}", "job_none"))


def body_readers(_client: Client) -> list[str]:
    """Every POST path whose handler reads the request body (of an app built for its routes
    only: it never starts)."""
    found = []
    routes = create_app("postgresql://unused/none", settings=ServiceSettings.from_env().runner(
        Path(tempfile.gettempdir()))).routes
    for route in routes:
        if not isinstance(route, HTTPRoute):
            continue
        for handler in route.route_handlers:
            if "POST" in handler.http_methods and "request" in \
                    handler.parsed_fn_signature.parameters:
                found.append(document_path(route.path_format))
    return found


async def test_the_document_is_valid_openapi(client: Client) -> None:
    validate_openapi(await document(client))


async def test_every_post_that_reads_a_body_documents_it(client: Client) -> None:
    paths = (await document(client))["paths"]
    readers = body_readers(client)
    assert len(readers) >= 12
    for path in readers:
        operation = paths[path]["post"]
        body = operation.get("requestBody")
        assert body is not None, path
        media = body["content"]["application/json"]
        assert media["schema"], path
        assert "example" in media, path


async def test_required_is_what_an_empty_body_gets(client: Client) -> None:
    """A body documented as required is refused when empty; an optional one is not."""
    paths = (await document(client))["paths"]
    for path in body_readers(client):
        required = paths[path]["post"]["requestBody"]["required"]
        response = await client.post(concrete(path), content=b"",
                                      headers={"content-type": "application/json"})
        if required:
            assert response.status_code == 400, (path, response.text)
            assert response.json()["error"]["code"] == "invalid-request"
        else:
            assert response.status_code != 400, (path, response.text)


async def test_every_documented_example_is_accepted(client: Client) -> None:
    """Each example passes the body decoding and the gate: a dry run answers 200/201, or
    404 for ids that name nothing, never 400 or 422."""
    paths = (await document(client))["paths"]
    for path, item in paths.items():
        operation = item.get("post")
        if operation is None or "requestBody" not in operation:
            continue
        example = operation["requestBody"]["content"]["application/json"]["example"]
        response = await client.post(concrete(path), params={"dryRun": "true"}, json=example)
        # a runner-protocol example decodes, then the missing job token is refused (401)
        allowed = (401,) if path.startswith("/api/v1/runner/") else (200, 201, 404)
        assert response.status_code in allowed, (path, response.text)


async def test_the_submit_example_submits(client: Client) -> None:
    response = await client.post("/api/v1/queue/tasks", json=examples.SUBMIT)
    assert response.status_code == 201, response.text
    assert response.json()["title"] == examples.SUBMIT["title"]


async def test_integer_bounds_are_the_code_s_own(client: Client) -> None:
    """Bounds are integers, exactly the code's (``afterSeq`` ≤ 2**62, not 4.6e18)."""
    paths = (await document(client))["paths"]
    after_seq = next(p for p in paths["/api/v1/sessions/{sessionId}/output"]["get"]
                     ["parameters"] if p["name"] == "afterSeq")
    assert after_seq["schema"]["maximum"] == 2**62
    assert type(after_seq["schema"]["maximum"]) is int
    raw = (await client.get(SCHEMA)).text
    assert "e+18" not in raw and not re.search(r'"(minimum|maximum)":\s*-?\d+\.\d', raw)
    too_far = await client.get("/api/v1/sessions/ses_none/output",
                               params={"afterSeq": str(2**62 + 1)})
    assert too_far.status_code == 400


async def test_the_cursor_pattern_is_exactly_what_the_code_takes(client: Client) -> None:
    paths = (await document(client))["paths"]
    cursor = next(p for p in paths["/api/v1/queue/tasks"]["get"]["parameters"]
                  if p["name"] == "cursor")
    assert cursor["schema"]["pattern"] == CURSOR_PATTERN
    for value in ("a0", "d42", "d" + "9" * 18):
        ok = await client.get("/api/v1/queue/tasks", params={"cursor": value})
        assert ok.status_code == 200, (value, ok.text)
        assert re.fullmatch(CURSOR_PATTERN, value)
    for value in ("x1", "d01", "d" + "1" * 19, "ZDo0Mg", "a-1", "a 1"):
        refused = await client.get("/api/v1/queue/tasks", params={"cursor": value})
        assert refused.status_code == 400, (value, refused.text)
        assert refused.json()["error"]["code"] == "invalid-request"
        assert not re.fullmatch(CURSOR_PATTERN, value)


async def test_a_next_cursor_continues_the_list(client: Client) -> None:
    for index in range(3):
        created = await client.post("/api/v1/queue/tasks",
                                    json=task_body(title=f"page {index}"))
        assert created.status_code == 201, created.text
    first = (await client.get("/api/v1/queue/tasks", params={"limit": "2"})).json()
    assert re.fullmatch(CURSOR_PATTERN, first["nextCursor"])
    rest = (await client.get("/api/v1/queue/tasks",
                             params={"limit": "2", "cursor": first["nextCursor"]})).json()
    seen = {item["taskId"] for item in first["items"]}
    assert rest["items"] and not seen & {item["taskId"] for item in rest["items"]}


async def test_a_dry_run_of_post_sessions_answers_the_documented_200(client: Client) -> None:
    responses = (await document(client))["paths"]["/api/v1/sessions"]["post"]["responses"]
    assert {"200", "201"} <= set(responses)
    planned = await client.post("/api/v1/sessions", params={"dryRun": "true"}, json={})
    assert planned.status_code == 200, planned.text
    assert planned.json()["mutation"] is False
    listed = await client.get("/api/v1/sessions", params={"state": "all"})
    assert listed.json()["items"] == []


async def test_every_operation_documents_its_errors_in_the_envelope(client: Client) -> None:
    doc = await document(client)
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method not in ("get", "post"):
                continue
            errors = {code for code in operation["responses"] if code.startswith(("4", "5"))}
            assert {"400", "503"} <= errors, (method, path)
            if method == "post" and "requestBody" in operation:
                assert "413" in errors, path
            for code in errors:
                schema = operation["responses"][code]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorEnvelope"}, (path, code)


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/api/v1/queue/tasks", "GET, OPTIONS, POST"),
    ("PUT", "/api/v1/sessions", "GET, OPTIONS, POST"),
    ("GET", "/api/v1/queue/tasks/tsk_x/retry", "OPTIONS, POST"),
    ("DELETE", "/api/v1/runs/run_x/runner-job", "GET, OPTIONS, POST"),
])
async def test_a_wrong_method_is_405_with_allow(client: Client, method: str, path: str,
                                                allowed: str) -> None:
    response = await client.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allowed
    assert response.json()["error"]["code"] == "method-not-allowed"
    options = await client.options(path)
    assert options.headers["allow"] == allowed


class Links(HTMLParser):
    """Every URL a page loads (src, href)."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]


@pytest.mark.parametrize("page", ["/api/v1/schema", "/api/v1/schema/swagger"])
async def test_the_docs_page_loads_only_local_files(client: Client, page: str) -> None:
    """The page names only this app's URLs, each answers 200 with the package's file, and
    the document it renders is the served one: nothing comes from a CDN."""
    response = await client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    links = Links()
    links.feed(response.text)
    assert len(links.urls) == len(ASSETS)
    assert not re.search(r"https?://|//[a-z]", response.text)
    for url in links.urls:
        assert url.startswith("/api/v1/schema/assets/"), url
        asset = await client.get(url)
        assert asset.status_code == 200, url
        assert asset.content == (assets_dir() / url.rsplit("/", 1)[1]).read_bytes()
    assert f'url: "{SCHEMA}"' in response.text
    missing = await client.get("/api/v1/schema/assets/swagger-editor.js")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not-found"


async def test_a_task_command_on_a_session_s_id_is_not_found(client: Client) -> None:
    """Found by schemathesis: a session may be named ``0``; a task command addressed to
    ``0`` must not fold the session's events as a task's (it answered 500)."""
    created = await client.post("/api/v1/sessions", json={"sessionId": "0"})
    assert created.status_code == 201, created.text
    for action, body in (("read", {"readerId": "me"}), ("cancel", {})):
        response = await client.post(f"/api/v1/queue/tasks/0/{action}", json=body)
        assert response.status_code == 404, (action, response.text)
        assert response.json()["error"]["code"] == "not-found"
    session = await client.get("/api/v1/sessions/0")
    assert session.status_code == 200, session.text


@settings(max_examples=300, deadline=None, database=None)
@given(st.from_regex(model.REPO_URL_SCHEMA["pattern"], fullmatch=True))
def test_a_repo_url_the_document_allows_is_accepted(url: str) -> None:
    model.check_repo_url(url, "repoUrl")


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(st.text(max_size=30), st.from_regex(r"[a./\\%2eE]{0,12}", fullmatch=True)))
def test_the_relative_path_pattern_is_exactly_the_check(path: str) -> None:
    allowed = re.fullmatch(model.RELATIVE_PATH_SCHEMA["pattern"], path) is not None
    try:
        model.check_relative_path(path, "path")
        accepted = True
    except DomainError:
        accepted = False
    assert allowed == accepted, path


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True),
                 st.sampled_from(sorted(model.CREDENTIAL_NAMES | model.RESERVED_NAMES)),
                 st.from_regex(r"SVC_[A-Z]{1,5}|[A-Z]{1,5}_(PRIVATE_KEY|PASSWORD)",
                               fullmatch=True)))
def test_the_transient_name_schema_is_exactly_the_check(name: str) -> None:
    allowed = jsonschema.Draft202012Validator(
        {"pattern": r"^[A-Z_][A-Z0-9_]*$", **model.TRANSIENT_NAME_SCHEMA}).is_valid(name)
    try:
        model.check_names({name: "x"})
        accepted = True
    except DomainError:
        accepted = False
    assert allowed == accepted, name


async def test_storage_refresh_takes_any_spelling_of_the_empty_object(client: Client) -> None:
    """The document allows ``{}`` there (maxProperties 0), so ``{ }`` is the same body."""
    created = await client.post("/api/v1/sessions", json={})
    assert created.status_code == 201, created.text
    path = f"/api/v1/sessions/{created.json()['sessionId']}/storage/refresh"
    answers = [await client.post(path, content=raw,
                                 headers={"content-type": "application/json"})
               for raw in (b"{}", b"{ }", b" {\n} ")]
    assert {a.status_code for a in answers} == {answers[0].status_code}, [a.text for a in answers]
    assert answers[0].status_code < 500 and answers[0].status_code != 400, answers[0].text
    partial = await client.post(path, json={"storageSizeBytes": 1})
    assert partial.status_code == 400


async def test_latest_attempt_is_a_typed_object(client: Client) -> None:
    """``latestAttempt`` of a task (list item and detail) is the ``LatestAttempt`` schema, every
    field named and required, its state the attempt states."""
    schemas = (await document(client))["components"]["schemas"]
    typed = {"oneOf": [{"$ref": "#/components/schemas/LatestAttempt"}, {"type": "null"}]}
    for owner in ("TaskItem", "TaskDetail"):
        assert schemas[owner]["properties"]["latestAttempt"] == typed, owner
    latest = schemas["LatestAttempt"]
    names = {"attemptId", "retryIndex", "state", "runId", "commandId", "runnerJobId",
             "sessionId", "sessionPath", "failureKind", "failureMessage", "usage"}
    assert latest["type"] == "object"
    assert set(latest["properties"]) == set(latest["required"]) == names
    assert latest["properties"]["state"] == {"$ref": "#/components/schemas/AttemptStatus"}
