"""Secret hygiene (issue 4 item 7): canary values planted in every secret, transientEnv
entry, repository credential and LAB_API_KEY never appear -- raw, base64-, URL- or
JSON-encoded -- in any HTTP body, CLI output, log line at DEBUG, ledger payload, job file
or backend output, across dispatch, dry runs and failure paths."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from urllib.parse import quote

import httpx

from tests.bundles import bundle_ref, make_bundle_repo
from tests.conftest import free_port, running_api
from tests.grants_support import defaults_file, granting
from tests.support import SECRET_CANARY, stored_outputs, task_body
from tests.test_cli import svc

TOOL_CANARY = "ToolTok#/!%:@canary-7d21"
REPO_CANARY = "P@ss#w/rd!%:canary-4c3e"
TRANSIENT_CANARY = "Transient&canary=5a9b"
LAB_CANARY = "LabApiKey-canary-88f0"
CANARIES = (SECRET_CANARY, TOOL_CANARY, REPO_CANARY, TRANSIENT_CANARY, LAB_CANARY)
"""Job paths that are the secret projections themselves: the only places values belong."""


def encodings(value: str) -> set[str]:
    """The forms a leaked value could take."""
    return {value, base64.b64encode(value.encode()).decode(), quote(value, safe=""),
            json.dumps(value)[1:-1]}


def leaks(text: str) -> list[str]:
    return [form for canary in CANARIES for form in encodings(canary) if form in text]


def plant_secrets(data: Path) -> None:
    for name, values in {
        "tool-token": {"GIT_HOST_TOKEN": TOOL_CANARY},
        "tool-ssh": {"id_ed25519": TOOL_CANARY, "known_hosts": "k", "config": "c"},
        "repo-cred": {"username": "bot", "password": REPO_CANARY},
    }.items():
        folder = data / "secrets" / "svc-v01" / name
        folder.mkdir(parents=True, exist_ok=True)
        for key, value in values.items():
            (folder / key).write_text(value)


REPO_HOST = "127.0.0.1"
"""Where the repository credential is granted (and allowed by ``SVC_FETCH_ALLOW_HOSTS``): a
closed port there, over https, so the credential goes through the runner and the fetch
fails."""


def grants_env(folder: Path) -> dict[str, str]:
    """The server's env granting ``acme`` the secrets of :func:`policy` and ``repo-cred``
    for :data:`REPO_HOST` (a defaults file in ``folder``)."""
    credentials = policy("tool-token", "tool-ssh", "missing")["secretScope"]
    path = defaults_file(folder / "runtime-defaults.json", granting(
        *credentials["toolCredentials"],  # type: ignore[index]
        repositories={"repo-cred": [REPO_HOST]}))
    return {"SVC_RUNTIME_DEFAULTS": str(path), "SVC_FETCH_ALLOW_HOSTS": REPO_HOST}


def repo_credential_bundle() -> dict[str, object]:
    """A bundle fetched with ``repo-cred`` from a granted host where nothing listens."""
    return {"kind": "gitbundle", "repoUrl": f"https://{REPO_HOST}:{free_port()}/acme/r.git",
            "credentialRef": {"name": "repo-cred", "keys": ["username", "password"]}}


def policy(*names: str) -> dict[str, object]:
    credentials = {
        "tool-token": {"tool": "git-host", "purpose": "pull-request",
                       "secretRef": {"name": "tool-token", "keys": ["GIT_HOST_TOKEN"]},
                       "projection": {"kind": "env", "envName": "GIT_HOST_TOKEN"}},
        "tool-ssh": {"tool": "git-host", "purpose": "git-host-ssh",
                     "secretRef": {"name": "tool-ssh",
                                   "keys": ["id_ed25519", "known_hosts", "config"]},
                     "projection": {"kind": "volume", "mountPath": "/home/svc/.ssh"}},
        "missing": {"tool": "git-host", "purpose": "pull-request",
                    "secretRef": {"name": "no-such-secret", "keys": ["GIT_HOST_TOKEN"]},
                    "projection": {"kind": "env", "envName": "GIT_HOST_TOKEN"}},
    }
    return {"secretScope": {"toolCredentials": [credentials[n] for n in names]}}


async def test_no_canary_leaks_anywhere(database_url: str, tmp_path: Path) -> None:
    # the bundle brings the code-host CLI the pull-request credential needs (SPEC 5.2 rule 7)
    repo = make_bundle_repo(tmp_path / "src", tools=("tran", "trans", "apply_patch", "gh"))
    plant_secrets(tmp_path / "data")
    outputs: list[str] = []
    env = {"SVC_LOG_LEVEL": "DEBUG", **grants_env(tmp_path)}
    async with running_api(database_url, tmp_path, env) as api, httpx.AsyncClient() as http:
        async def post(path: str, body: object) -> httpx.Response:
            response = await http.post(f"{api}{path}", json=body)
            outputs.append(response.text)
            return response

        # a repository credential goes only over https or ssh (test_secret_grants): the
        # file:// bundle goes without one, the credential with a task of its own below
        good = (await post("/api/v1/queue/tasks", task_body(
            resourceBundleRef=bundle_ref(repo),
            executionPolicy=policy("tool-token", "tool-ssh")))).json()
        transient = json.dumps({"transientEnv": {"LAB_API_KEY": LAB_CANARY,
                                                 "OWNER_CONTEXT": TRANSIENT_CANARY}})
        for args in (("queue", "dispatch", good["taskId"], "--json-stdin", "--dry-run"),
                     ("queue", "dispatch", good["taskId"], "--json-stdin", "--raw")):
            result = svc(*args, api=api, stdin=transient)
            assert result.returncode == 0, result.stderr
            outputs += [result.stdout, result.stderr]
        for _ in range(100):
            task = (await post(f"/api/v1/queue/tasks/{good['taskId']}/refresh", {})).json()
            if task["state"] != "running":
                break
            await asyncio.sleep(0.1)
        assert task["state"] == "completed", task
        run_id = task["latestAttempt"]["runId"]
        for args in (("runs", "show", run_id), ("runs", "show", run_id, "--raw"),
                     ("runs", "plan", run_id, "--json-stdin"), ("queue", "show",
                                                                good["taskId"], "--full")):
            result = svc(*args, api=api, stdin=transient)
            assert result.returncode == 0, result.stderr
            outputs += [result.stdout, result.stderr]
        session_id = task["latestAttempt"]["sessionId"]
        for args in (("sessions", "show", session_id, "--raw"),
                     ("sessions", "output", session_id, "--all"),
                     ("sessions", "trace", session_id, "--all"), ("sessions", "ps", "--raw")):
            result = svc(*args, api=api)
            assert result.returncode == 0, result.stderr
            outputs += [result.stdout, result.stderr]
        fetched = (await post("/api/v1/queue/tasks", task_body(
            resourceBundleRef=repo_credential_bundle()))).json()
        await post(f"/api/v1/queue/tasks/{fetched['taskId']}/dispatch", {})
        for _ in range(200):
            ended = (await post(f"/api/v1/queue/tasks/{fetched['taskId']}/refresh", {})).json()
            if ended["state"] != "running":
                break
            await asyncio.sleep(0.1)
        assert ended["latestAttempt"]["failureKind"] == "bundle-unavailable", ended
        outputs.append((await http.get(
            f"{api}/api/v1/runs/{ended['latestAttempt']['runId']}/runner-job")).text)
        missing = (await post("/api/v1/queue/tasks", task_body(
            executionPolicy=policy("missing")))).json()
        failed = await post(f"/api/v1/queue/tasks/{missing['taskId']}/dispatch",
                            {"transientEnv": {"LAB_API_KEY": LAB_CANARY}})
        assert failed.json()["latestAttempt"]["failureKind"] == "secret-unavailable"
        for bad in ({"transientEnv": {"GIT_HOST_TOKEN": TOOL_CANARY}},
                    {"transientEnv": {"lower-case": LAB_CANARY}}):
            assert (await post(f"/api/v1/queue/tasks/{good['taskId']}/dispatch",
                               bad)).status_code == 400
        url = f"https://bot:{REPO_CANARY}@code.example/acme/repo.git"
        refused = await post("/api/v1/queue/tasks", task_body(
            resourceBundleRef={"kind": "gitbundle", "repoUrl": url}))
        assert refused.status_code == 400
        # issue 13: a URL password is refused at intake, before the assembly gate
        assert refused.json()["error"]["code"] == "credential-in-request"
    stored, files = await stored_outputs(database_url, tmp_path)
    jobs = tmp_path / "data" / "jobs"
    assert any(p.name == "stdout.log" for p in files) and any(p.name == "trace.jsonl"
                                                             for p in files)
    outputs += stored
    projected = "".join(p.read_text(errors="replace") for p in jobs.rglob("*")
                        if p.is_file() and p not in files)
    removed = [json.loads(line)["files"] for path in jobs.glob("*/trace.jsonl")
               for line in path.read_text().splitlines() if '"secrets-removed"' in line]
    assert any({"job-secret", "home/.ssh/id_ed25519", "home/.backend/auth.json"} <= set(names)
               for names in removed), \
        "the canaries really went through the run (into its secret projections only)"
    assert not leaks(projected), "the secret projections left with their job (issue 26)"
    assert any("DEBUG" in text for text in outputs), "the server logged at DEBUG"
    found = {form for text in outputs for form in leaks(text)}
    assert found == set(), f"leaked: {found}"
