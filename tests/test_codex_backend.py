"""The ``codex`` backend kind with the real Codex CLI (npm ``@openai/codex`` at the version
the Makefile pins, installed in ``.tools/codex`` by ``make test-setup``) through the service,
with each driver: ``local`` (under bubblewrap) and ``kubernetes`` (the pod runner under the
test kubelet of tests/test_driver_conformance.py, whose image holds the Codex install). The
model is the only stand-in: a mock Responses API (:mod:`tests.codex_mock`) that the profile
secret's ``config.toml`` points Codex at. Every test runs once per driver, with one body."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from api.settings import ServiceSettings
from runner_assembly.assembly.defaults import BuiltImage, RuntimeDefaults
from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.runner.backends import install_root
from runner_assembly.settings import RunnerSettings
from tests.codex_mock import MODEL, MockResponses, config_toml, user_messages
from tests.conftest import app_client
from tests.support import task_body
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle
from tests.test_driver_conformance import Kubelet, store_secrets
from tests.test_k8s_dispatch import kube  # noqa: F401  (the emulator fixture)
from tests.test_k8s_driver import IMAGE, SOURCE
from tests.test_sessions import lines

CODEX = Path(__file__).resolve().parents[1] / ".tools/codex/node_modules/.bin/codex"
"""The npm ``.bin`` link, as an operator names it (the service binds its install root)."""
API_KEY_CANARY = "sk-codexCanary-7f3a9e1c5b2d4068"
"""The profile secret's API key: Codex must send it to the model, nobody may print it."""
TURN_TIMEOUT_S = 180
"""Node's start, Codex's start and two model round trips, on a busy machine."""
DRIVERS = ("local", "kubernetes")

if not CODEX.exists():  # `make test` installs it first: only a bare pytest run skips
    pytest.skip(f"{CODEX} is missing (`make codex` installs it)", allow_module_level=True)


@pytest.fixture
def model() -> Iterator[MockResponses]:
    """The mock Responses API, serving for the test."""
    served = MockResponses().start()
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture
def codex_settings(tmp_path: Path, model: MockResponses) -> RunnerSettings:
    """Settings whose profile-1 is the ``codex`` kind naming the npm link, with a profile
    secret pointing Codex at the mock."""
    data = tmp_path / "svc-data"
    secret = data / "secrets" / "svc-v01" / PROFILE_SECRETS["profile-1"].name
    secret.mkdir(parents=True)
    (secret / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": API_KEY_CANARY}))
    (secret / "config.toml").write_text(config_toml(model.base_url))
    return ServiceSettings.from_env({
        "SVC_BACKEND_KIND_PROFILE_1": "codex", "SVC_BACKEND_COMMAND_PROFILE_1": str(CODEX),
        # the sandboxed backend reaches the host's loopback only where forwarded: the model
        "SVC_BACKEND_LOOPBACK_PORTS": str(model.server.server_address[1]),
        # a pod's backend goes out through its runner's egress proxy: the model is allowed
        "SVC_FETCH_ALLOW_HOSTS": f"127.0.0.1:{model.server.server_address[1]}",
    }).runner(data)


@dataclass(frozen=True)
class Place:
    """Where the driver under test runs its jobs: its settings and, for ``kubernetes``, the
    test kubelet running the pods."""

    settings: RunnerSettings
    kubelet: Kubelet | None = None

    def volume(self, record: dict[str, Any]) -> Path:
        """The session volume of the session ``record`` (the claim's directory on the
        node for a pod)."""
        if self.kubelet is None:
            return self.settings.sessions_dir / str(record["sessionId"])
        return self.kubelet.root / "pvc" / str(record["storage"]["pvcName"])

    def found(self, name: str) -> list[Path]:
        """The files called ``name`` the jobs left (in their workspaces)."""
        if self.kubelet is None:
            return [path for folder in job_dirs(self.settings) for path in folder.rglob(name)]
        return sorted(self.kubelet.root.glob(f"*/volumes/workspace/**/{name}"))

    def logs(self) -> list[Path]:
        """The jobs' own files of what they printed: the runner's scratch (output, errors,
        trace) and, for a pod, its containers' logs."""
        if self.kubelet is None:
            return [folder / name for folder in job_dirs(self.settings)
                    for name in ("stdout.log", "stderr.log", "trace.jsonl")]
        root = self.kubelet.root
        return sorted([*root.glob("*/*.log"), *root.glob("*/volumes/home/.svc/*.*")])


@asynccontextmanager
async def placed(request: pytest.FixtureRequest, settings: RunnerSettings,
                 tmp_path: Path, image_env: dict[str, str] | None = None,
                 ) -> AsyncIterator[Place]:
    """``settings`` with the driver they name; for ``kubernetes`` the emulated API server
    holds the profile secret and the kubelet's image holds the Codex install (read-only,
    where it lies) and sets ``image_env``."""
    if settings.driver == "local":
        yield Place(settings)
        return
    server = request.getfixturevalue("kube")
    store_secrets(server, settings.secrets_dir)
    kubelet = Kubelet(server, tmp_path / "node")
    kubelet.image_paths = [install_root(CODEX)]
    kubelet.image_env = image_env or {}
    watcher = asyncio.create_task(kubelet.watch())
    try:
        yield Place(dataclasses.replace(
            settings, driver="kubernetes", kubernetes_api=str(server.url).rstrip("/"),
            defaults=RuntimeDefaults(imageSource=SOURCE, smokeTools=["git"],
                                     images=[BuiltImage(source=SOURCE, image=IMAGE)])), kubelet)
    finally:
        watcher.cancel()
        await kubelet.close()


@pytest.fixture(params=DRIVERS)
async def place(request: pytest.FixtureRequest, codex_settings: RunnerSettings,
                tmp_path: Path) -> AsyncIterator[Place]:
    """The driver under test, its profile-1 naming the Codex program."""
    async with placed(request, dataclasses.replace(codex_settings, driver=request.param),
                      tmp_path) as where:
        yield where


@pytest.fixture(params=DRIVERS)
async def place_by_path(request: pytest.FixtureRequest, codex_settings: RunnerSettings,
                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                        ) -> AsyncIterator[Place]:
    """The driver under test, its profile-1 the ``codex`` kind without a program: Codex is on
    the ``PATH`` of the server (and, for ``kubernetes``, of the runner's image)."""
    path = f"{CODEX.parent}:{MINIMAL_PATH}"
    monkeypatch.setenv("PATH", f"{CODEX.parent}:{os.environ['PATH']}")
    settings = ServiceSettings.from_env({
        "SVC_BACKEND_KIND_PROFILE_1": "codex", "SVC_RUNNER_DRIVER": request.param,
        "SVC_BACKEND_LOOPBACK_PORTS": ",".join(map(str, codex_settings.backend_loopback_ports)),
        "SVC_FETCH_ALLOW_HOSTS": ",".join(
            f"127.0.0.1:{port}" for port in codex_settings.backend_loopback_ports),
    }).runner(codex_settings.data_dir)
    async with placed(request, settings, tmp_path, {"PATH": path}) as where:
        yield where


def ref(session_id: str) -> dict[str, Any]:
    """A sessionRef of a session whose thread the service keeps."""
    return {"sessionId": session_id, "conversationId": f"conv-{session_id}"}


def events(output: list[str]) -> list[dict[str, Any]]:
    """Codex's JSON events among the output lines."""
    found = []
    for line in output:
        if line.startswith("{"):
            try:
                found.append(json.loads(line))
            except ValueError:
                continue
    return found


def started_threads(output: list[str]) -> list[str]:
    """The threads Codex announced (``thread.started``)."""
    return [event["thread_id"] for event in events(output)
            if event.get("type") == "thread.started"]


async def items(client: Any, session_id: str) -> list[tuple[str, str]]:
    """The session's output items: each one's stream and line."""
    response = await client.get(f"/api/v1/sessions/{session_id}/output",
                                params={"limit": 1000})
    assert response.status_code == 200, response.text
    return [(item["stream"], item["line"]) for item in response.json()["items"]]


async def session(client: Any, session_id: str) -> dict[str, Any]:
    """The session's record."""
    response = await client.get(f"/api/v1/sessions/{session_id}")
    assert response.status_code == 200, response.text
    return dict(response.json())


async def run(client: Any, prompt: str, session_id: str,
              thread_id: str | None = None) -> dict[str, Any]:
    """Submit a task of the session (resuming ``thread_id`` when given), dispatch and settle
    it: the settled task."""
    payload = {"prompt": prompt, **({"threadId": thread_id} if thread_id else {})}
    response = await client.post(TASKS, json=task_body(payload=payload,
                                                       sessionRef=ref(session_id)))
    assert response.status_code == 201, response.text
    task_id = response.json()["taskId"]
    await dispatch(client, task_id)
    return await settle(client, task_id, timeout=TURN_TIMEOUT_S)


async def test_codex_runs_a_shell_command_then_resumes_its_thread(
    database_url: str, place: Place, model: MockResponses
) -> None:
    async with app_client(database_url, place.settings) as client:
        # the agent also prints the profile secret's auth.json: the runner masks its values
        first = await run(client, "run: echo made-by-codex > codex-made.txt && "
                          "cat ~/.backend/auth.json", "cx1")
        first_output = await lines(client, "cx1")
        second = await run(client, "and now a second turn", "cx1")
        output = await lines(client, "cx1")
        trace = [json.loads(line) for line in await lines(client, "cx1", "trace")]
        record = await session(client, "cx1")
        streams = {stream for stream, _line in await items(client, "cx1")}
    assert first["state"] == "completed", (first, first_output)
    made = place.found("codex-made.txt")
    assert [path.read_text() for path in made] == ["made-by-codex\n"], \
        "the agent's shell command wrote in the workspace"
    (thread,) = started_threads(first_output)
    assert second["state"] == "completed", (second, output)
    assert started_threads(output) == [thread, thread], "the second turn resumed the thread"
    assert record["threadId"] == thread and record["turns"] == 2
    assert [turn["resumed"] for turn in record["recentTurns"]] == [True, False]
    last = model.responses()[-1]
    assert any("made-by-codex" in text for text in user_messages(last)), \
        "the resumed turn sent the earlier messages to the model"
    assert set(model.authorizations) == {f"Bearer {API_KEY_CANARY}"}, \
        "Codex read the profile secret's auth.json in CODEX_HOME"
    assert [event["usage"]["output_tokens"] for event in trace
            if event["kind"] == "backend-usage"] == [60, 90], "usage of turn.completed"
    traced = [event["usage"] for event in trace if event["kind"] == "backend-usage"]
    assert [first["latestAttempt"]["usage"], second["latestAttempt"]["usage"]] == [
        {"inputTokens": usage["input_tokens"], "cachedInputTokens": usage["cached_input_tokens"],
         "outputTokens": usage["output_tokens"],
         "reasoningOutputTokens": usage["reasoning_output_tokens"]} for usage in traced], \
        "the usage Codex reported is recorded on each attempt"
    rollouts = list(place.volume(record).rglob(f"rollout-*-{thread}.jsonl"))
    assert len(rollouts) == 1, "Codex's rollout lies in the session volume"
    everything = json.dumps([first, second, record, output, trace])
    assert API_KEY_CANARY not in everything
    executed = [event["item"] for event in events(first_output)
                if event.get("type") == "item.completed"
                and event["item"].get("type") == "command_execution"]
    assert [(item["aggregated_output"], item["exit_code"]) for item in executed] == [
        ("[masked]", 0)], "the agent printed auth.json: masked"
    assert API_KEY_CANARY in json.dumps(model.responses()[1]), \
        "the command read the key (the model alone saw it)"
    assert "stdout" in streams, "Codex's events are the session's output (its standard "\
        "error: test_a_bogus_thread_is_refused_and_never_replaced)"
    assert any(f"`{MODEL}`" in line for line in output), "the model's name is not masked"
    logs = place.logs()
    assert logs and all(API_KEY_CANARY not in log.read_text() for log in logs), \
        "nor in the job's logs"


async def test_a_bogus_thread_is_refused_and_never_replaced(
    database_url: str, place: Place, model: MockResponses
) -> None:
    unreadable = "01a21f39-c7a8-7920-b993-0000000000aa"
    async with app_client(database_url, place.settings) as client:
        first = await run(client, "hello", "cx2")
        assert first["state"] == "completed", first
        started = await session(client, "cx2")
        thread = started["threadId"]
        volume = place.volume(started)
        # a rollout that Codex cannot read: it is found, Codex starts, fails to resume and
        # confirms no thread
        (volume / f"rollout-2026-01-01T00-00-00-{unreadable}.jsonl").write_text("")
        tried = await run(client, "resume an unreadable thread", "cx2", unreadable)
        # refused before Codex starts: a name Codex would take for a thread name (it then
        # starts a new thread), and a thread without rollout
        named = await run(client, "resume a named thread", "cx2", "thr_bogus")
        missing = await run(client, "resume a lost thread", "cx2",
                            "01a21f39-c7a8-7920-b993-0000000000bb")
        record = await session(client, "cx2")
        output = await lines(client, "cx2")
        errors = [line for stream, line in await items(client, "cx2") if stream == "stderr"]
        trace = [json.loads(line) for line in await lines(client, "cx2", "trace")]
    for task in (tried, named, missing):
        assert task["state"] == "blocked", task
        assert task["latestAttempt"]["failureKind"] == "session-store-evicted"
    assert started_threads(output) == [thread], "no replacement thread"
    assert record["threadId"] == thread, "a failed resume leaves the session's thread"
    assert len(model.responses()) == 1, "the model saw only the first turn"
    assert any(line.startswith("Error: thread/resume") and unreadable in line
               for line in errors), ("Codex's standard error reaches the session", errors)
    refused = [event["reason"] for event in trace if event["kind"] == "backend-resume-refused"]
    assert refused == ["thr_bogus is not a Codex thread id (a UUID)",
                       "no rollout of thread 01a21f39-c7a8-7920-b993-0000000000bb in the "
                       "session volume"]
    assert [event["kind"] for event in trace].count("backend-start") == 2
    assert API_KEY_CANARY not in json.dumps([tried, named, missing, record, output, trace])


async def test_a_deleted_rollout_is_session_store_evicted_with_no_replacement_thread(
    database_url: str, place: Place, model: MockResponses
) -> None:
    """The session's own thread (no ``payload.threadId``) whose rollout was deleted from the
    session volume: found before Codex starts; the turn is blocked, nothing replaces it."""
    async with app_client(database_url, place.settings) as client:
        first = await run(client, "hello", "cx3")
        assert first["state"] == "completed", first
        started = await session(client, "cx3")
        thread = started["threadId"]
        (rollout,) = place.volume(started).rglob(f"rollout-*-{thread}.jsonl")
        rollout.unlink()
        lost = await run(client, "carry on", "cx3")
        record = await session(client, "cx3")
        output = await lines(client, "cx3")
        trace = [json.loads(line) for line in await lines(client, "cx3", "trace")]
    assert lost["state"] == "blocked", lost
    assert lost["latestAttempt"]["failureKind"] == "session-store-evicted"
    assert f"no rollout of thread {thread}" in lost["latestAttempt"]["failureMessage"]
    assert [event["reason"] for event in trace if event["kind"] == "backend-resume-refused"] \
        == [f"no rollout of thread {thread} in the session volume"]
    assert [event["kind"] for event in trace].count("backend-start") == 1, \
        "Codex did not start for the lost thread"
    assert started_threads(output) == [thread], "no replacement thread"
    assert record["threadId"] == thread, "the session keeps its thread"
    assert len(model.responses()) == 1, "the model saw only the first turn"


async def test_codex_named_alone_is_found_on_the_path_where_the_runner_runs(
    database_url: str, place_by_path: Place, model: MockResponses
) -> None:
    """No program named: a local server resolves ``codex`` on its ``PATH``; the kubernetes
    manager leaves it to the pod, whose runner finds it on its image's ``PATH`` (the
    manager's may name another install) and runs it as a named one (node, install root)."""
    place = place_by_path
    named = ("codex",) if place.kubelet else (str(CODEX),)
    assert place.settings.backend_commands["profile-1"] == named
    async with app_client(database_url, place.settings) as client:
        done = await run(client, "hello", "cx4")
        output = await lines(client, "cx4")
        record = await session(client, "cx4")
    assert done["state"] == "completed", (done["latestAttempt"], output)
    (thread,) = started_threads(output)
    assert record["threadId"] == thread
    assert len(model.responses()) == 1
