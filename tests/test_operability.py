"""Health, readiness, metrics, request ids and structured logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from api.observability import FLUSH_EVERY, Metrics
from tests.conftest import running_api
from tests.support import task_body

TASKS = "/api/v1/queue/tasks"


async def test_health_and_ready_carry_the_capability_summary(client: Any) -> None:
    for path, status in (("/api/v1/health", "ok"), ("/api/v1/ready", "ready")):
        answer = (await client.get(path)).json()
        assert answer["status"] == status
        ready = answer["workReady"]
        assert ready["valuesPrinted"] is False and ready["version"] == answer["version"]
        assert set(ready) == {"version", "tools", "dependencyPolicy", "valuesPrinted"}
    assert (await client.get("/api/v1/ready")).json()["migrations"] == "current"


async def test_ready_fails_while_migrations_are_pending(client: Any, database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("DELETE FROM schema_migrations WHERE version = 3")
    finally:
        await conn.close()
    answer = await client.get("/api/v1/ready")
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "2"
    assert answer.json()["error"]["code"] == "infra-failed"
    assert answer.json()["error"]["details"]["pending"] == ["core"]
    assert (await client.get("/api/v1/health")).status_code == 200


async def test_metrics_count_requests_appends_and_dispatches(client: Any) -> None:
    task = (await client.post(TASKS, json=task_body())).json()
    await client.post(f"{TASKS}/{task['taskId']}/dispatch", json={})
    await client.get(f"{TASKS}/tsk_missing")
    text = (await client.get("/metrics")).text
    assert 'svc_http_requests_total{method="POST",route="/api/v1/queue/tasks",status="201"}' \
        in text
    assert ('svc_http_requests_total{method="GET",route="/api/v1/queue/tasks/{task_id}",'
            'status="404"}') in text
    assert 'svc_http_request_duration_seconds_bucket{' in text
    appended = next(line for line in text.splitlines()
                    if line.startswith("svc_ledger_appends_total"))
    assert float(appended.split()[-1]) >= 4  # submit, reserve, run, job, materialized
    assert "svc_projection_write_seconds_count" in text
    assert 'svc_dispatches_total{outcome="running"} 1.0' in text


def test_request_metrics_counted_in_batches_show_every_request_at_a_scrape() -> None:
    metrics = Metrics()

    def scraped() -> dict[str, float]:
        return {name: float(value) for name, value in (
            line.rsplit(" ", 1) for line in metrics.render().decode().splitlines()
            if line.startswith(("svc_http_requests_total", "svc_http_request_duration")))}

    requests = FLUSH_EVERY + 3  # a full batch, then three waiting for the next one
    for number in range(requests):
        metrics.request("/r", "POST", 201 if number % 2 else 500, 0.002)
    counts = scraped()
    assert counts['svc_http_requests_total{method="POST",route="/r",status="201"}'] \
        == requests // 2
    assert counts['svc_http_requests_total{method="POST",route="/r",status="500"}'] \
        == requests - requests // 2
    assert counts['svc_http_request_duration_seconds_count{method="POST",route="/r"}'] \
        == requests
    metrics.request("/r", "POST", 201, 0.5)
    counts = scraped()
    assert counts['svc_http_request_duration_seconds_count{method="POST",route="/r"}'] \
        == requests + 1
    assert counts['svc_http_request_duration_seconds_bucket{le="0.5",method="POST",route="/r"}'] \
        == requests + 1
    assert counts['svc_http_request_duration_seconds_bucket{le="0.25",method="POST",route="/r"}'] \
        == requests


async def test_every_answer_carries_a_request_id(client: Any) -> None:
    mine = await client.get("/api/v1/health", headers={"x-request-id": "abc-123"})
    assert mine.headers["x-request-id"] == "abc-123"
    made = await client.get("/api/v1/health", headers={"x-request-id": "bad id;<x>"})
    assert made.headers["x-request-id"].startswith("req_")
    failed = await client.get(f"{TASKS}/tsk_nope")
    assert failed.headers["x-request-id"].startswith("req_")
    assert failed.headers["x-request-id"] != made.headers["x-request-id"]


async def test_logs_are_json_lines_with_request_ids_and_no_secrets(
    database_url: str, tmp_path: Path
) -> None:
    canary = "LogCanaryToken0123456789abcdefGHIJ"
    debug = {"SVC_LOG_LEVEL": "DEBUG"}  # successful requests are logged at DEBUG
    async with running_api(database_url, tmp_path, debug) as base, httpx.AsyncClient(
            base_url=base) as http:
        body = task_body(payload={"prompt": f"https://bot:{canary}@git.example.org/x"})
        await http.post(TASKS, json=body, headers={"x-request-id": "trace-0"})  # refused
        body = task_body(metadata={"note": f"GH_TOKEN={canary}"})
        await http.post(TASKS, json=body, headers={"x-request-id": "trace-1"})
        await http.get(f"{TASKS}/nope-{canary}")
    log = next(tmp_path.glob("serve-*.log")).read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    access = [line for line in lines if line["logger"] == "svc.access"]
    assert any(line["requestId"] == "trace-0" and line["status"] == 400 for line in access)
    assert any(line["requestId"] == "trace-1" and line["status"] == 201 for line in access)
    assert all({"ts", "level", "logger", "msg", "requestId"} <= set(line) for line in lines)
    assert canary not in log


async def test_at_info_only_failed_requests_leave_an_access_line(
    database_url: str, tmp_path: Path
) -> None:
    async with running_api(database_url, tmp_path) as base, httpx.AsyncClient(
            base_url=base) as http:
        created = await http.post(TASKS, json=task_body(), headers={"x-request-id": "ok-1"})
        missing = await http.get(f"{TASKS}/tsk_nope", headers={"x-request-id": "miss-1"})
    assert (created.status_code, missing.status_code) == (201, 404)
    log = next(tmp_path.glob("serve-*.log")).read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    access = {line["requestId"]: line for line in lines if line["logger"] == "svc.access"}
    assert access["miss-1"]["status"] == 404
    assert access["miss-1"]["route"] == "/api/v1/queue/tasks/{task_id}"
    assert "ok-1" not in access
