"""Metrics an operator can alert on (issue 28 item 2): the projections' figures after a
scripted workload, one view of the counters across the workers of ``svc serve --workers 2``
(a killed worker's counts stay, its live gauge goes), and the log lines: RFC 3339 times,
whole traces in one JSON line, repeats held back."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from prometheus_client.parser import text_string_to_metric_families

from api.log_repeats import RepeatLimiter
from api.metrics_dir import PREFIX, private_metrics_dir
from api.observability import JsonFormatter
from ledger.version import VERSION
from runner_assembly.settings import RunnerSettings
from tests.conftest import SERVER_PIDS, running_api
from tests.support import TEST_ADMIN_KEY, task_body, with_database
from tests.test_cli_usage import _alive, _workers_of
from tests.test_dispatch import dispatch, job_dirs, settle, submit

TASKS = "/api/v1/queue/tasks"
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    """Every sample of an exposition, by name and label set."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(scraped: Samples, name: str, **labels: str) -> float | None:
    """The sample ``name{labels}`` (None when absent)."""
    return scraped.get((name, frozenset(labels.items())))


def named(scraped: Samples, name: str) -> dict[frozenset[tuple[str, str]], float]:
    """Every sample called ``name``, by label set."""
    return {labels: figure for (each, labels), figure in scraped.items() if each == name}


async def test_a_scripted_workload_shows_in_the_gauges(
    client: Any, runner_settings: RunnerSettings
) -> None:
    alpha = [await submit(client, queue="alpha") for _ in range(2)]  # two left pending
    running = await submit(client, "sleep: 60", queue="alpha")
    await dispatch(client, running)
    lost = await submit(client, "sleep: 60", queue="beta")
    await dispatch(client, lost)
    (job,) = [folder for folder in job_dirs(runner_settings)
              if folder.name == (await client.get(f"{TASKS}/{lost}")).json()[
                  "latestAttempt"]["runnerJobId"]]
    os.killpg(int((job / "pid").read_text()), signal.SIGKILL)  # gone without a word
    ended = await settle(client, lost)
    assert ended["latestAttempt"]["failureKind"] == "runner-lost", ended
    cancelled = await submit(client, queue="beta")
    assert (await client.post(f"{TASKS}/{cancelled}/cancel", json={})).status_code == 200
    profiles = {task_id: (await client.get(f"{TASKS}/{task_id}")).json().get("backendProfile")
                or "" for task_id in (*alpha, running, lost, cancelled)}
    assert profiles[running] == "profile-1", "the profile label carries the task's profile"

    answer = await client.get("/metrics")
    assert answer.status_code == 200
    scraped = samples(answer.text)
    tasks = named(scraped, "svc_queue_tasks")
    counts: dict[tuple[str, str, str], float] = {}
    for labels, count in tasks.items():
        label = dict(labels)
        assert set(label) == {"queue", "lane", "state", "profile"}, label
        key = (label["queue"], label["state"], label["profile"])
        counts[key] = counts.get(key, 0) + count
    assert {key: count for key, count in counts.items() if count} == {
        ("alpha", "pending", profiles[alpha[0]]): 2,
        ("alpha", "running", profiles[running]): 1,
        ("beta", "failed", profiles[lost]): 1,
        ("beta", "cancelled", profiles[cancelled]): 1,
    }
    oldest = named(scraped, "svc_queue_oldest_pending_seconds")
    assert [dict(labels)["queue"] for labels in oldest] == ["alpha"], oldest  # beta: none
    assert 0 < next(iter(oldest.values())) < 600
    assert value(scraped, "svc_runner_jobs", state="running") == 1
    assert value(scraped, "svc_runner_jobs", state="created") == 0
    assert value(scraped, "svc_runner_lost_total") == 1
    assert value(scraped, "svc_database_up") == 1
    assert value(scraped, "svc_workers") == 1
    (build,) = named(scraped, "svc_build_info")
    assert dict(build)["version"] == VERSION and scraped[("svc_build_info", build)] == 1
    assert (value(scraped, "process_resident_memory_bytes") or 0) > 0
    assert "svc_http_requests_total" in answer.text
    assert not any(name == "tenant" or name.startswith("tenant") for _, labels in scraped
                   for name, _ in labels)
    assert TEST_ADMIN_KEY not in answer.text
    await client.post(f"{TASKS}/{running}/cancel", json={})  # its runner stopped


async def test_a_scrape_without_the_database_still_answers(
    client: Any, database_url: str
) -> None:
    await submit(client, queue="alpha")
    name = await (conn := await asyncpg.connect(database_url)).fetchval("SELECT current_database()")
    await conn.close()
    admin = await asyncpg.connect(with_database(database_url, "postgres"))
    try:
        await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        await admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = $1 AND pid <> pg_backend_pid()", name)
        answer = await client.get("/metrics")
    finally:
        await admin.execute(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true')
        await admin.close()
    assert answer.status_code == 200
    scraped = samples(answer.text)
    assert value(scraped, "svc_database_up") == 0
    assert not named(scraped, "svc_queue_tasks")
    assert value(scraped, "svc_http_requests_total", method="POST",
                 route="/api/v1/queue/tasks", status="201") == 1


async def scrape(base: str) -> tuple[str, Samples]:
    """One scrape on a new connection (so any worker may answer): the answering worker's
    request-id prefix (one per process), and the samples."""
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        answer = await http.get("/metrics")
    assert answer.status_code == 200
    assert TEST_ADMIN_KEY not in answer.text
    return answer.headers["x-request-id"].rsplit("_", 1)[0], samples(answer.text)


def submits(scraped: Samples) -> float:
    """The submits counted (a counter that only grows here)."""
    return value(scraped, "svc_http_requests_total", method="POST",
                 route="/api/v1/queue/tasks", status="201") or 0.0


async def scrape_until(base: str, done: Any, within: float = 60) -> list[tuple[str, Samples]]:
    """Scrape until ``done(scrapes so far)``; every scrape, in order."""
    scrapes: list[tuple[str, Samples]] = []
    deadline = time.monotonic() + within
    while not done(scrapes):
        assert time.monotonic() < deadline, [(w, submits(s)) for w, s in scrapes]
        scrapes.append(await scrape(base))
        await asyncio.sleep(0.05)
    return scrapes


def agreed(scrapes: list[tuple[str, Samples]], expected: float, workers: float) -> bool:
    """Two workers have each answered a scrape counting ``expected`` submits and
    ``workers`` workers."""
    return len({worker for worker, scraped in scrapes if submits(scraped) == expected
                and value(scraped, "svc_workers") == workers}) >= 2


def never_went_back(scrapes: list[tuple[str, Samples]]) -> None:
    """The counters of successive scrapes never decrease, whichever worker answered."""
    for (_, before), (_, after) in itertools.pairwise(scrapes):
        for name in ("svc_http_requests_total", "svc_ledger_appends_total"):
            for labels, figure in named(before, name).items():
                assert after.get((name, labels), 0) >= figure, (name, dict(labels))


async def test_every_worker_answers_a_scrape_with_the_same_counters(
    database_url: str, tmp_path: Path
) -> None:
    async with running_api(database_url, tmp_path, {"SVC_WORKERS": "2"}) as base:
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:  # one connection
            for number in range(5):
                assert (await http.post(TASKS, json=task_body(title=f"t{number}"))
                        ).status_code == 201
            assert (await http.get(f"{TASKS}/tsk_missing")).status_code == 404  # logged
        scrapes = await scrape_until(base, lambda seen: agreed(seen, 5, 2))
        never_went_back(scrapes)
        supervisor = SERVER_PIDS[base]
        workers = _workers_of(supervisor)
        pids = {dict(labels)["pid"]
                for labels in named(scrapes[-1][1], "process_resident_memory_bytes")}
        assert pids == {str(pid) for pid in (supervisor, *workers)}
        shared = Path(dict(line.split("=", 1) for line in Path(
            f"/proc/{workers[0]}/environ").read_text().split("\0") if "=" in line
        )["PROMETHEUS_MULTIPROC_DIR"])
        assert shared.is_dir() and shared.stat().st_mode & 0o777 == 0o700

        os.kill(workers[0], signal.SIGKILL)  # its counts stay; its live gauge goes
        deadline = time.monotonic() + 60
        while _alive(workers[0]) or len(_workers_of(supervisor)) < 2:
            assert time.monotonic() < deadline, "the supervisor did not replace the worker"
            await asyncio.sleep(0.1)
        later = await scrape_until(base, lambda seen: agreed(seen, 5, 2))
        never_went_back([*scrapes, *later])
    assert not shared.exists(), "the supervisor removes its metrics directory"
    log = next(tmp_path.glob("serve-*.log")).read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    assert lines and all(RFC3339_MS.match(line["ts"]) for line in lines)
    assert TEST_ADMIN_KEY not in log


def one_line(record: logging.LogRecord) -> dict[str, Any]:
    """A record formatted as the service does: one line, JSON."""
    text = JsonFormatter().format(record)
    assert "\n" not in text
    return dict(json.loads(text))


def test_a_log_line_has_an_rfc3339_utc_time_and_its_whole_trace() -> None:
    def fail_deep() -> None:
        raise ValueError(f"boom token={TEST_ADMIN_KEY}")

    logger = logging.getLogger("svc.test.format")
    try:
        fail_deep()
    except ValueError:
        record = logger.makeRecord(logger.name, logging.ERROR, __file__, 1, "loop failed",
                                   (), sys.exc_info())
    line = one_line(record)
    assert RFC3339_MS.match(line["ts"]), line["ts"]
    when = datetime.fromtimestamp(record.created, UTC)
    assert line["ts"] == when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"
    assert line["trace"].startswith("Traceback (most recent call last)")
    assert "in fail_deep" in line["trace"] and "ValueError: boom" in line["trace"]
    assert line["error"].startswith("ValueError: boom")
    assert TEST_ADMIN_KEY not in json.dumps(line), "the trace is redacted too"


def test_a_repeated_error_is_written_once_a_window_then_with_its_count() -> None:
    now = [0.0]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RepeatLimiter(window_s=60, clock=lambda: now[0]))
    logger = logging.getLogger("svc.test.repeats")
    logger.handlers[:], logger.propagate = [handler], False
    logger.setLevel(logging.DEBUG)
    try:
        for second in range(58):  # the database down: the same error every second
            now[0] = float(second)
            try:
                raise ConnectionRefusedError("connection refused")
            except OSError:
                logger.exception("session loop iteration failed")
            logger.warning("another warning")
            logger.info("request")  # below WARNING: never held back
        now[0] = 60.0
        try:
            raise ConnectionRefusedError("connection refused")
        except OSError:
            logger.exception("session loop iteration failed")
        try:  # another error under the same message is its own
            raise TimeoutError("timed out")
        except OSError:
            logger.exception("session loop iteration failed")
    finally:
        logger.handlers[:] = []
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    errors = [line for line in lines if line["level"] == "ERROR"]
    assert len(errors) == 3, errors
    assert "repeated" not in errors[0] and "repeated" not in errors[2]
    assert errors[1]["repeated"] == 57 and "repeated 57 times" in errors[1]["msg"]
    assert errors[2]["error"] == "TimeoutError: timed out"
    assert len([line for line in lines if line["msg"] == "another warning"]) == 1
    assert len([line for line in lines if line["msg"] == "request"]) == 58


def test_a_killed_supervisors_metrics_directory_is_removed_by_the_next(tmp_path: Path) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead, mine, alive = (tmp_path / f"{PREFIX}{pid}-x" for pid in (
        ended.pid, os.getpid(), os.getppid()))
    for path in (dead, mine, alive):
        path.mkdir()
        (path / "counter_1.db").write_bytes(b"")
    with private_metrics_dir(tmp_path) as fresh:
        assert fresh.stat().st_mode & 0o777 == 0o700
        assert sorted(tmp_path.iterdir()) == sorted([alive, fresh])
    assert list(tmp_path.iterdir()) == [alive]
