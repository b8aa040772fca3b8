"""What a backend prints reaches the session readable and whole (issue 27 items 4 and 6), with
a ``command`` backend under the local driver's sandbox, through the real app and the CLI:
its standard error arrives as the output's ``stderr`` stream and ends the failure message of
a failed turn, masked like standard output; a configuration file's ordinary strings (model
name, endpoint) stay readable while its API key is masked; a 50 KiB JSON line arrives whole
and a 200 KiB line in numbered parts that concatenate to it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import task_body, with_script_backend
from tests.test_cli import svc
from tests.test_dispatch import TASKS, dispatch, job_dirs, settle

API_KEY_CANARY = "canary-ApiKey-5e1d9b7c3a"
CONFIG = ('model = "mock-model"\nmodel_provider = "mock"\n\n[model_providers.mock]\n'
          f'name = "mock"\nbase_url = "http://127.0.0.1:1/v1"\napi_key = "{API_KEY_CANARY}"\n')
MAKE_HUGE = 'HUGE = "".join(chr(ord("a") + n % 26) for n in range(200 * 1024))'
"""A 200 KiB line (past a protocol line): it must come in parts."""
HUGE = "".join(chr(ord("a") + n % 26) for n in range(200 * 1024))
BACKEND = MAKE_HUGE + '''
import json, os, sys
config = open(os.path.join(os.environ["BACKEND_HOME"], "config.toml")).read()
key = config.split("api_key = ")[1].split('"')[1]
for line in config.splitlines():
    print("config:", line)
print(json.dumps({"type": "item.completed", "aggregated_output": "x" * 50_000,
                  "exit_code": 0, "status": "completed"}))
print(HUGE, flush=True)
print("warning: model mock-model answered slowly", file=sys.stderr)
for n in range(30):
    print(f"err line {n}", file=sys.stderr)
print("fatal: the model refused the key", key, file=sys.stderr)
sys.exit(3)
'''


async def items(client: Any, session_id: str, channel: str = "output") -> list[dict[str, Any]]:
    """Every item of a session channel."""
    found: list[dict[str, Any]] = []
    while True:
        response = await client.get(f"/api/v1/sessions/{session_id}/{channel}",
                                    params={"afterSeq": found[-1]["seq"] if found else 0})
        assert response.status_code == 200, response.text
        found += response.json()["items"]
        if not response.json()["items"]:
            return found


async def test_stderr_long_lines_and_a_readable_configuration(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = with_script_backend(runner_settings, BACKEND)
    secret = runner_settings.data_dir / "secrets" / "svc-v01" / PROFILE_SECRETS["profile-1"].name
    (secret / "config.toml").write_text(CONFIG)
    async with app_client(database_url, settings) as client:
        response = await client.post(TASKS, json=task_body(
            sessionRef={"sessionId": "streams", "conversationId": "c"}))
        assert response.status_code == 201, response.text
        await dispatch(client, response.json()["taskId"])
        task = await settle(client, response.json()["taskId"], timeout=60)
        output = await items(client, "streams")
        trace = await items(client, "streams", "trace")
        printed = await asyncio.to_thread(svc, "sessions", "output", "streams", "--all",
                                          api=str(client.base_url))
    attempt = task["latestAttempt"]
    assert task["state"] == "failed", task
    message = attempt["failureMessage"]
    assert message.startswith("backend exited with 3; its standard error ended with: "), message
    assert message.endswith("err line 29 | fatal: the model refused the key [masked]"), message
    assert "err line 11 | " in message and "err line 10 " not in message, "the last 20 lines"
    stderr = [item["line"] for item in output if item["stream"] == "stderr"]
    assert stderr[0] == "warning: model mock-model answered slowly"
    assert stderr[-1] == "fatal: the model refused the key [masked]" and len(stderr) == 32
    stdout = [item for item in output if item["stream"] == "stdout"]
    said = [item["line"] for item in stdout]
    assert 'config: model = "mock-model"' in said, "a model name is not a secret"
    assert 'config: base_url = "http://127.0.0.1:1/v1"' in said
    (key,) = [line for line in said if "api_key" in line]
    assert key in ('config: api_key = "[masked]"', 'config: api_key = "[redacted]"'), key
    (whole,) = [item for item in stdout if item["line"].startswith('{"type"')]
    assert whole["part"] is None and len(whole["line"]) > 50_000
    assert json.loads(whole["line"])["status"] == "completed", "a 50 KiB line arrives whole"
    parts = [item for item in stdout if item["part"] is not None]
    assert [(item["part"], item["parts"]) for item in parts] == [(n, 4) for n in (1, 2, 3, 4)]
    assert "".join(item["line"] for item in parts) == HUGE, "the parts are the line"
    assert all(len(item["line"].encode()) <= 64 * 1024 for item in output)
    assert printed.returncode == 0, printed.stderr
    assert "stderr| warning: model mock-model answered slowly" in printed.stdout.splitlines()
    assert "[part 2/4] " in printed.stdout
    logs = [folder / name for folder in job_dirs(settings)
            for name in ("stdout.log", "stderr.log", "trace.jsonl")]
    everything = json.dumps([task, output, trace]) + printed.stdout + printed.stderr
    assert API_KEY_CANARY not in everything + "".join(log.read_text() for log in logs)
