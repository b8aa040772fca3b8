"""The direct path of a runner's lines and heartbeats (:mod:`api.runner_reports`) answers
every report, good or hostile, exactly as the Litestar handlers do: two apps on one
database, one with the direct path and one without, each given the same requests for a job
of its own, must agree on status, headers and body, and store the same lines."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar
from litestar.di import Provide

from api import runner_reports
from api.app import MAX_BODY_BYTES, create_app
from api.runner_reports import bypass_problems
from api.runner_routes import RunnerController
from runner_assembly.settings import RunnerSettings
from tests.conftest import free_port, listening
from tests.support import snapshot
from tests.test_runner_protocol import JOBS, auth, protocol_on, stored_lines

Request = Callable[[str, str, str], dict[str, Any]]
"""Given the job, its token and the other side's token: ``httpx`` request arguments."""
UNSTABLE_HEADERS = {"date", "x-request-id"}


@asynccontextmanager
async def served(database_url: str, settings: RunnerSettings, *,
                 direct: bool) -> AsyncIterator[httpx.AsyncClient]:
    port = free_port()
    app = create_app(database_url, direct_reports=direct, settings=dataclasses.replace(
        settings, runner_api_url=f"http://127.0.0.1:{port}"))
    async with listening(app, port), httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        yield http


def lines(body: object) -> Request:
    return lambda job, token, _: {"url": f"{JOBS}/{job}/lines", "json": body,
                                  "headers": auth(token)}


def raw(path: str, content: bytes, headers: Callable[[str, str], dict[str, str]]) -> Request:
    return lambda job, token, other: {"url": f"{JOBS}/{job}/{path}", "content": content,
                                      "headers": headers(token, other)}


async def streamed(chunks: list[bytes]) -> AsyncIterator[bytes]:
    """A body sent in chunks, with no ``Content-Length``."""
    for chunk in chunks:
        yield chunk


def bearer(token: str, _: str) -> dict[str, str]:
    return {**auth(token), "content-type": "application/json"}


CASES: list[tuple[str, Request]] = [
    ("lines before the claim", lines({"channel": "output", "seq": 1, "lines": ["x"]})),
    ("claim", lambda job, token, _: {"url": f"{JOBS}/{job}/claim", "headers": auth(token),
                                     "json": {"claimant": "r1"}}),
    ("unknown channel", lines({"channel": "debug", "seq": 1, "lines": []})),
    ("seq 0", lines({"channel": "output", "seq": 0, "lines": []})),
    ("lines not a list", lines({"channel": "output", "seq": 1, "lines": "x"})),
    ("unknown field", lines({"channel": "output", "seq": 1, "lines": [], "extra": 1})),
    ("not an object", lines([1, 2])),
    ("null", lines(None)),
    ("seq as a string", lines({"channel": "output", "seq": "1", "lines": ["x"]})),
    ("seq huge", lines({"channel": "output", "seq": 2**70, "lines": ["x"]})),
    ("part past its count", lines({"channel": "output", "seq": 1, "lines": [
        {"text": "a", "part": 3, "parts": 2}]})),
    ("trace of stderr", lines({"channel": "trace", "seq": 1, "lines": ["t"],
                               "stream": "stderr"})),
    ("malformed JSON", raw("lines", b"{nope", bearer)),
    ("empty lines body", raw("lines", b"", bearer)),
    ("deep nesting", raw("lines", b"[" * 10_000 + b"]" * 10_000, bearer)),
    ("too large", raw("lines", b" " * (MAX_BODY_BYTES + 1), bearer)),
    ("too large, streamed", lambda job, token, _: {
        "url": f"{JOBS}/{job}/lines", "headers": bearer(token, ""),
        "content": streamed([b" " * 65536] * (MAX_BODY_BYTES // 65536 + 1))}),
    ("streamed", lambda job, token, _: {
        "url": f"{JOBS}/{job}/heartbeat", "headers": bearer(token, ""),
        "content": streamed([b"{", b"}"])}),
    ("no token", raw("lines", b"{}", lambda _, __: {})),
    ("basic scheme", raw("lines", b"{}", lambda token, _: {"authorization": f"Basic {token}"})),
    ("bearer of no value", raw("heartbeat", b"", lambda _, __: {"authorization": "Bearer"})),
    ("the other job's token", raw("heartbeat", b"", lambda _, other: auth(other))),
    ("a token too long", raw("heartbeat", b"", lambda _, __: auth("x" * 600))),
    ("a forged token", raw("heartbeat", b"", lambda token, _: auth(token[:-2] + "zz"))),
    ("lowercase bearer", raw("heartbeat", b"", lambda token, _: {
        "authorization": f"bearer {token}"})),
    ("heartbeat with a field", raw("heartbeat", b'{"x": 1}', bearer)),
    ("heartbeat of null", raw("heartbeat", b"null", bearer)),
    ("heartbeat", raw("heartbeat", b"", bearer)),
    ("heartbeat of {}", raw("heartbeat", b"{}", bearer)),
    ("batch 1", lines({"channel": "output", "seq": 1,
                       "lines": ["one", "two\x00", "ghp_" + "a" * 36, "é ☃"]})),
    ("batch 1 again", lines({"channel": "output", "seq": 1, "lines": ["other"]})),
    ("a gap", lines({"channel": "output", "seq": 3, "lines": ["c"]})),
    ("batch 2 with an integral float", lines({"channel": "output", "seq": 2.0,
                                              "lines": ["b"]})),
    ("parts", lines({"channel": "output", "seq": 3, "lines": [
        {"text": "half", "part": 1, "parts": 2}, {"text": "way", "part": 2, "parts": 2}]})),
    ("trace", lines({"channel": "trace", "seq": 1, "lines": ["t"]})),
    ("a job id the route refuses", lambda _, token, __: {
        "url": f"{JOBS}/-leading-dash/lines", "headers": auth(token),
        "json": {"channel": "output", "seq": 1, "lines": []}}),
    ("a job id too long", lambda _, token, __: {
        "url": f"{JOBS}/{'j' * 129}/heartbeat", "headers": auth(token)}),
    ("GET", lambda job, token, _: {"url": f"{JOBS}/{job}/heartbeat", "method": "GET",
                                   "headers": auth(token)}),
]

ACCEPTED = {"claim", "lowercase bearer", "streamed", "heartbeat", "heartbeat of {}"}
"""The cases up to the first batch that are taken (a beat renews the lease row)."""
PASSED_ON = {"claim", "a job id the route refuses", "a job id too long", "GET"}
"""The cases the direct path leaves to Litestar."""
UNREAD = {"too large", "too large, streamed"}
"""The cases refused while the body is read, before a report is taken."""
FIRST_BATCH = [name for name, _ in CASES].index("batch 1")
REFUSALS = [(name, case) for name, case in CASES[:FIRST_BATCH]
            if name not in ACCEPTED | {"lines before the claim"}]
"""The cases refused once the job is claimed, before its first batch is taken."""


def runner_requests(exposition: str) -> dict[str, float]:
    """The request counts of the runner routes in a ``/metrics`` answer, by labels."""
    return {labels: float(value) for line in exposition.splitlines()
            if line.startswith("svc_http_requests_total{") and "/runner/jobs/" in line
            for labels, value in [line.removeprefix("svc_http_requests_total").split(" ")]}


def comparable(answer: httpx.Response, job: str, token: str) -> tuple[int, list[Any], str]:
    """Status, stable headers and body, with the side's own job id and token made equal."""
    headers = [(name, value.replace(job, "JOB")) for name, value in answer.headers.items()
               if name not in UNSTABLE_HEADERS]
    return (answer.status_code, headers,
            answer.text.replace(token, "TOKEN").replace(job, "JOB"))


async def test_the_direct_path_answers_every_report_as_the_handlers_do(
    app_url: str, database_url: str, runner_settings: RunnerSettings, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        tokens = {side: await protocol.issue(f"job_{side}", session_id=f"ses_{side}",
                                             run_id=f"run_{side}") for side in "dh"}
    taken: list[str] = []
    for template, take in list(runner_reports.REPORTS.items()):
        async def counted(*args: Any, _take: Any = take, _name: str = template) -> object:
            taken.append(_name)
            return await _take(*args)
        monkeypatch.setitem(runner_reports.REPORTS, template, counted)
    async with served(app_url, runner_settings, direct=True) as direct, \
            served(app_url, runner_settings, direct=False) as handlers:
        for name, case in CASES:
            before = len(taken)
            answers = []
            for side, http in (("d", direct), ("h", handlers)):
                token, other = tokens[side], tokens["h" if side == "d" else "d"]
                arguments = case(f"job_{side}", token, other)
                answer = await http.request(arguments.pop("method", "POST"), **arguments)
                answers.append(comparable(answer, f"job_{side}", token))
            assert answers[0] == answers[1], name
            assert answers[0][0] < 500, (name, answers[0])
            assert len(taken) - before == (0 if name in PASSED_ON | UNREAD else 1), name
        counted = [runner_requests((await http.get("/metrics")).text)
                   for http in (direct, handlers)]
    assert counted[0] == counted[1] and sum(counted[0].values()) >= len(CASES) - 3, counted
    assert await stored_lines(database_url, "ses_d", "output") == \
        await stored_lines(database_url, "ses_h", "output")
    assert await stored_lines(database_url, "ses_d", "trace") == [(1, "t")]


async def test_a_refused_report_through_the_direct_path_changes_nothing(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_r", session_id="ses_r", run_id="run_r")
    await client.post(f"{JOBS}/job_r/claim", json={"claimant": "r1"}, headers=auth(token))
    await client.post(f"{JOBS}/job_r/lines", headers=auth(token),
                      json={"channel": "output", "seq": 1, "lines": ["kept"]})
    before = await snapshot(database_url)
    for name, case in REFUSALS:
        arguments = case("job_r", token, token[:-2] + "zz")
        answer = await client.request(arguments.pop("method", "POST"), **arguments)
        assert 400 <= answer.status_code < 500, (name, answer.status_code)
        assert set(answer.json()) == {"error"}, name
    assert await snapshot(database_url) == before, "refusals change nothing"


def runner_routes_only(**options: Any) -> Litestar:
    """An app of the runner routes alone (their service never built)."""
    return Litestar([RunnerController], dependencies={
        "runner_api": Provide(lambda: None, sync_to_thread=False)}, **options)


def test_the_app_refuses_to_step_over_layers_the_routes_would_have() -> None:
    assert bypass_problems(runner_routes_only()) == []
    guarded = bypass_problems(runner_routes_only(guards=[lambda _, __: None]))
    assert len(guarded) == 2 and all("guards" in problem for problem in guarded)
    assert bypass_problems(runner_routes_only(allowed_hosts=["a.example"])) == [
        "the app sets allowed_hosts"]
    assert bypass_problems(Litestar([])) == [f"no POST route {template}"
                                             for template in runner_reports.REPORTS]
