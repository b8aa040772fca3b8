"""Schemathesis against the served OpenAPI document, on one real server process per module,
plus hand-picked hostile inputs: none may produce a 5xx, every 4xx is in the envelope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate as validate_openapi

from tests.conftest import TEMPLATE, _admin, running_api
from tests.support import replay_report, task_body, unique_name, with_database

SCHEMA_PATH = "/api/v1/schema/openapi.json"
ROOT = Path(__file__).resolve().parent.parent
RUNTIME_DEFAULTS = {"extSshEndpoints": {"EXT_MAIN_SERVER_HOST": "main.internal"}}
"""The operator's defaults give ``ext-ssh`` its endpoint (as README's example does): without
one, dispatching a task that asks for ``ext-ssh`` is refused for the operator's missing
configuration, not for the request's shape."""


@pytest.fixture(scope="module")
async def fuzz_database(server_url: str, template_url: str) -> AsyncIterator[str]:
    """A database of this module's own."""
    name = unique_name("svc_fuzz")
    await _admin(server_url, f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"')
    yield with_database(server_url, name)
    await _admin(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
async def fuzz_api(fuzz_database: str,
                   tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """A real ``svc serve`` on that database, shared by this module."""
    folder = tmp_path_factory.mktemp("fuzz")
    (folder / "defaults.json").write_text(json.dumps(RUNTIME_DEFAULTS))
    async with running_api(fuzz_database, folder,
                           {"SVC_RUNTIME_DEFAULTS": str(folder / "defaults.json")}) as base:
        yield base


def assert_envelope(response: Any) -> None:
    if 400 <= response.status_code < 500:
        body = response.json()
        assert set(body) == {"error"}, body
        assert {"code", "message", "details"} <= set(body["error"]), body
        assert body["error"]["code"] and body["error"]["message"]


def test_the_openapi_document_is_valid(fuzz_api: str) -> None:
    validate_openapi(httpx.get(fuzz_api + SCHEMA_PATH).json())


def test_schemathesis_with_all_checks_finds_nothing(fuzz_api: str, tmp_path: Path) -> None:
    """Every phase (examples, coverage, fuzzing, stateful) and every check, bodies included,
    plus the error-envelope check of ``tests/schemathesis_hooks.py``: no 5xx, no answer
    outside the document, no valid input refused, no invalid input taken."""
    examples = os.environ.get("SVC_FUZZ_EXAMPLES", "4")
    # One worker: CPython 3.11's ``ast.parse`` is not safe across threads (hypothesis describes
    # filter lambdas with it), and two workers now and then died with "SystemError: AST
    # constructor recursion depth mismatch" inside the tool, not in the API.
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks",
           "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    run = subprocess.run(
        [str(Path(sys.executable).parent / "schemathesis"), "--config-file",
         str(ROOT / "tests" / "schemathesis.toml"), "run", fuzz_api + SCHEMA_PATH,
         "--checks", "all", "--max-examples", examples, "--workers", "1",
         "--seed", os.environ.get("SVC_FUZZ_SEED", "17"),
         "--no-color", "--report-dir", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


HOSTILE_BODIES = [
    ("NUL in a string", task_body(title="a\u0000b")),
    ("huge integer", task_body(priority=10**100)),
    ("oversized string", task_body(title="x" * 200_000)),
    ("oversized key", {**task_body(), "k" * 100_000: 1}),
    ("deep nesting", task_body(metadata={"a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]
                                                 ]]]]]]]]]]]]]]]]]]]]]]]})),
]
POSTS = ["/api/v1/queue/tasks", "/api/v1/queue/tasks/tsk_x/cancel",
         "/api/v1/queue/tasks/tsk_x/read", "/api/v1/queue/tasks/tsk_x/dispatch",
         "/api/v1/queue/tasks/tsk_x/retry", "/api/v1/manifests/validate"]


@pytest.mark.parametrize("path", POSTS)
@pytest.mark.parametrize(("case", "body"), HOSTILE_BODIES, ids=[c for c, _ in HOSTILE_BODIES])
def test_hostile_bodies_are_client_errors(fuzz_api: str, path: str, case: str,
                                          body: Any) -> None:
    response = httpx.post(fuzz_api + path, json=body, timeout=30)
    assert 400 <= response.status_code < 500 or (
        path.endswith("validate") and response.status_code == 200), (case, response.text)
    assert_envelope(response)


@pytest.mark.parametrize("raw", [b"\xff\xfe\x00", b'{"title": "\xc3\x28"}', b"\x00" * 10,
                                 b'{"a":' * 100_000])
@pytest.mark.parametrize("path", POSTS)
def test_undecodable_bodies_are_client_errors(fuzz_api: str, path: str, raw: bytes) -> None:
    response = httpx.post(fuzz_api + path, content=raw,
                          headers={"content-type": "application/json"}, timeout=30)
    assert 400 <= response.status_code < 500, response.text
    assert_envelope(response)


@pytest.mark.parametrize("query", [
    "limit=" + "9" * 40, "limit=-5", "updatedAfter=" + "9" * 40, "cursor=%00",
    "queue=%00", "queue=" + "q" * 10_000, "state=%FF", "cursor=" + "A" * 5000,
])
def test_hostile_query_values_are_client_errors(fuzz_api: str, query: str) -> None:
    for path in ("/api/v1/queue/tasks", "/api/v1/queue/commander", "/api/v1/queue/stats",
                 "/api/v1/queue/tasks/tsk_x/attempts"):
        response = httpx.get(f"{fuzz_api}{path}?{query}", timeout=30)
        assert response.status_code < 500, (path, query, response.text)
        assert_envelope(response)


@pytest.mark.parametrize("path", ["/api/v1/queue/tasks/%00", "/api/v1/queue/tasks/" + "t" * 5000,
                                  "/api/v1/sessions/%FF%FE", "/api/v1/queue/tasks/a%2F..%2Fb"])
def test_hostile_paths_are_client_errors(fuzz_api: str, path: str) -> None:
    response = httpx.get(fuzz_api + path, timeout=30)
    assert 400 <= response.status_code < 500, response.text
    assert_envelope(response)


async def test_after_the_fuzzing_replay_still_equals_the_projections(
    fuzz_api: str, fuzz_database: str
) -> None:
    assert httpx.get(fuzz_api + "/api/v1/ready").status_code == 200
    report = await replay_report(fuzz_database)
    assert report.ok, report
