"""A careless backend (issue 13): it prints its whole environment, every file of its home,
JSON-wrapped, base64- and URL-encoded secrets and a secret split across two flushed writes.
No canary reaches session output or trace (API and CLI), logs, ledger, run records or job
files; its ordinary lines arrive unchanged."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from pathlib import Path
from urllib.parse import quote

import httpx

from tests.bundles import bundle_ref, make_bundle_repo
from tests.conftest import running_api
from tests.support import stored_outputs, task_body
from tests.test_cli import svc
from tests.test_secret_hygiene import (
    CANARIES,
    LAB_CANARY,
    TOOL_CANARY,
    TRANSIENT_CANARY,
    grants_env,
    leaks,
    plant_secrets,
    policy,
)

PLAIN = ("plain: Fix TestHttpClientRetriesOnTimeoutWith503Status in client_test.go",
         "plain: src/main/java/com/example/service/OrderProcessingService2.java",
         "plain: commit 3f2a9c1e0b5d7a8c9e1f3a5b7c9d1e3f5a7b9c1d ok")

CARELESS = r'''
import base64, json, os, sys, time
from urllib.parse import quote
values = [v for v in os.environ.values() if len(v) >= 6]
for name, value in sorted(os.environ.items()):
    print(f"{name}={value}")
for root in {os.environ["HOME"], os.environ["BACKEND_HOME"]}:
    for folder, _, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            try:
                content = open(path, errors="replace").read()
            except OSError:
                continue
            print(f"== {path}")
            print(content)
            values.append(content.strip())
for value in values:
    print(json.dumps({"token": value, "note": value}))
    for shift in range(3):
        raw = b"x" * shift + value.encode()
        print("b64", base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode())
    print("url", quote(value, safe=""), quote(value))
    print("stderr", value, file=sys.stderr)
for line in PLAIN:
    print(line)
split = os.environ["GIT_HOST_TOKEN"]
sys.stdout.write("split: " + split[:7])
sys.stdout.flush()
time.sleep(0.3)
sys.stdout.write(split[7:] + " end\n")
sys.stdout.flush()
'''


async def test_careless_backend_leaks_nothing(database_url: str, tmp_path: Path) -> None:
    # the bundle brings the code-host CLI the pull-request credential needs (SPEC 5.2 rule 7)
    repo = make_bundle_repo(tmp_path / "src", tools=("tran", "trans", "apply_patch", "gh"))
    plant_secrets(tmp_path / "data")
    script = tmp_path / "careless.py"
    script.write_text(f"PLAIN = {PLAIN!r}\n{CARELESS}")
    env = {"SVC_LOG_LEVEL": "DEBUG", **grants_env(tmp_path),
           "SVC_BACKEND_COMMAND_PROFILE_1": f"{sys.executable} {script}"}
    outputs: list[str] = []
    async with running_api(database_url, tmp_path, env) as api, httpx.AsyncClient() as http:
        # no repository credential over file:// (test_secret_grants; test_secret_hygiene
        # sends it over https)
        task = (await http.post(f"{api}/api/v1/queue/tasks", json=task_body(
            resourceBundleRef=bundle_ref(repo),
            executionPolicy=policy("tool-token", "tool-ssh")))).json()
        dispatched = await http.post(
            f"{api}/api/v1/queue/tasks/{task['taskId']}/dispatch",
            json={"transientEnv": {"LAB_API_KEY": LAB_CANARY, "OWNER_CONTEXT": TRANSIENT_CANARY}})
        outputs.append(dispatched.text)
        for _ in range(200):
            answer = await http.post(f"{api}/api/v1/queue/tasks/{task['taskId']}/refresh")
            outputs.append(answer.text)
            if answer.json()["state"] != "running":
                break
            await asyncio.sleep(0.1)
        assert answer.json()["state"] == "completed", answer.text
        session_id = answer.json()["latestAttempt"]["sessionId"]
        run_id = answer.json()["latestAttempt"]["runId"]
        lines: list[str] = []
        for channel in ("output", "trace"):
            after = 0
            while True:
                page = await http.get(f"{api}/api/v1/sessions/{session_id}/{channel}",
                                      params={"afterSeq": after, "limit": 200})
                assert page.status_code == 200, page.text
                outputs.append(page.text)
                items = page.json()["items"]
                if channel == "output":
                    lines += [item["line"] for item in items]
                if not items:
                    break
                after = page.json()["nextAfterSeq"]
        for args in (("sessions", "output", session_id, "--all"),
                     ("sessions", "trace", session_id, "--all"),
                     ("sessions", "output", session_id, "--all", "--raw"),
                     ("runs", "show", run_id, "--raw")):
            result = svc(*args, api=api)
            assert result.returncode == 0, result.stderr
            outputs += [result.stdout, result.stderr]
    text = "\n".join(lines)
    for plain in PLAIN:
        assert plain in lines, f"{plain!r} did not arrive unchanged"
    assert any(line.startswith("GIT_HOST_TOKEN=[") for line in lines)  # masked, then redacted
    assert "split: [masked] end" in text and '"note": "[masked]"}' in text
    stored, _files = await stored_outputs(database_url, tmp_path)
    outputs += stored
    found = {form for text in outputs for form in leaks(text) + _shifted_leaks(text)}
    assert found == set(), f"leaked: {found}"


def _shifted_leaks(text: str) -> list[str]:
    """Base64 of a canary behind 1 or 2 bytes of prefix (the other two alignments)."""
    forms = []
    for canary in CANARIES:
        for shift in (1, 2):
            for encode in (base64.b64encode, base64.urlsafe_b64encode):
                core = encode(b"x" * shift + canary.encode()).decode().rstrip("=")
                forms.append(core[(0, 2, 3)[shift]:-1])
        forms += [quote(canary), json.dumps(canary, ensure_ascii=False)[1:-1]]
    return [form for form in forms if form in text]


def test_canaries_are_long_enough() -> None:
    assert all(len(canary) >= 6 for canary in (*CANARIES, TOOL_CANARY))
