"""The low-noise CLI output of SPEC 4.3 rule 8 and the facts it shows, against a real
``svc serve``: every line the issue asked for, and the facts that used to mislead."""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import httpx

from tests.conftest import running_api
from tests.support import task_body
from tests.test_cli import submit, svc, wait_session


def dispatch_and_wait(api: str, task_id: str, terminal: str) -> None:
    """Dispatch, then refresh until the task is ``terminal``."""
    dispatched = svc("queue", "dispatch", task_id, api=api)
    assert dispatched.returncode == 0, dispatched.stderr
    for _ in range(300):
        refreshed = svc("queue", "refresh", task_id, "--raw", api=api)
        if json.loads(refreshed.stdout)["state"] == terminal:
            return
        time.sleep(0.1)
    raise AssertionError(f"{task_id} never became {terminal}")


def session_of(api: str, task_id: str) -> str:
    detail = json.loads(svc("queue", "show", task_id, "--raw", api=api).stdout)
    return str(detail["latestAttempt"]["sessionId"])


def lines_of(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


async def test_list_commander_and_attempts_lines(served_api: str) -> None:
    """A blocked task: its list line names the failure, the next line its session, the
    recovery and the one ``svc sessions`` command; commander gives it one line naming the
    session once; attempts lines name the session; no ``budget=-`` without a budget."""
    blocked = submit(served_api, payload={"prompt": "blocker: prompt-unavailable"})
    pending = submit(served_api, title="Still waiting")
    dispatch_and_wait(served_api, blocked, "blocked")
    session = session_of(served_api, blocked)

    listed = svc("queue", "list", api=served_api).stdout
    lines = listed.splitlines()
    at = lines.index(lines_of(listed, blocked)[0])
    assert "blocked" in lines[at] and "failure=prompt-unavailable" in lines[at]
    assert f"session={session}" in lines[at + 1]
    assert f"next: svc queue retry {blocked} --idempotency-key" in lines[at + 1]
    assert f"svc sessions trace {session}" in lines[at + 1]
    waiting = lines[lines.index(lines_of(listed, pending)[0]) + 1]
    assert "session=" not in waiting and "svc sessions" not in waiting
    assert f"next: svc queue dispatch {pending}" in waiting
    assert "budget=" not in listed, "no budget configured: no budget noise"

    commander = svc("queue", "commander", api=served_api).stdout
    [line] = [line for line in commander.splitlines() if blocked in line]
    assert line.startswith(blocked), "one line per task"
    assert "failure=prompt-unavailable" in line and "phase=blocked" in line
    assert line.count(session) == 1 and f"svc sessions trace {session}" in line
    assert commander.count(session) == 1, "the session id is not repeated"
    assert "budget=" not in commander and "sessionPath" not in commander
    assert len(commander.splitlines()) == 1 + 2, "a header, then one line per task"
    raw = json.loads(svc("queue", "commander", "--raw", api=served_api).stdout)
    item = next(i for i in raw["items"] if i["taskId"] == blocked)
    assert item["failureKind"] == "prompt-unavailable"
    assert item["sessionPath"] == f"/api/v1/sessions/{session}"

    attempts = svc("queue", "attempts", blocked, api=served_api).stdout
    [attempt] = lines_of(attempts, "#0")
    assert f"session={session}" in attempt and "failure=prompt-unavailable" in attempt

    too_many = svc("queue", "list", "--limit", "501", api=served_api)
    assert too_many.returncode == 1 and too_many.stderr.startswith("error: invalid-request:")
    assert len(too_many.stderr.splitlines()) == 1 and "limit" in too_many.stderr, \
        "a refusal with detail problems stays one line"


async def test_a_budget_is_shown_and_an_evicted_session_never_suggests_send(
    database_url: str, tmp_path: Path
) -> None:
    env = {"SVC_QUEUE_TIMEOUT_BUDGETS": "main=30m", "SVC_SESSION_GC_INTERVAL_MS": "200",
           "SVC_SESSION_TTL_S": "10", "SVC_SESSION_SYNC_INTERVAL_MS": "50"}
    async with running_api(database_url, tmp_path, env) as api:
        task_id = submit(api)
        listed = svc("queue", "list", api=api).stdout
        assert "budget=30m" in listed
        assert "budget=30m" in svc("queue", "commander", api=api).stdout

        sent = svc("sessions", "send", "--prompt", "hello", api=api)
        assert sent.returncode == 0, sent.stderr
        session = sent.stdout.split("session=")[1].split()[0]
        live = svc("sessions", "show", session, api=api).stdout  # well within its 10 s TTL
        assert f"svc sessions send {session}" in live, "a usable session suggests send"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            shown = svc("sessions", "show", session, api=api).stdout
            if "storage: evicted" in shown:
                break
            time.sleep(0.2)
        assert "storage: evicted" in shown
        assert f"svc sessions send {session}" not in shown
        assert "send without SESSION_ID starts a new session" in shown
        refused = svc("sessions", "send", session, "--prompt", "again", api=api)
        assert refused.returncode == 1
        assert refused.stderr.startswith("error: session-store-evicted:")
        assert len(refused.stderr.strip().splitlines()) == 1
        assert task_id


async def test_read_says_marked_read_and_a_replayed_retry_says_so(served_api: str) -> None:
    task_id = submit(served_api, payload={"prompt": "exit: 3"})
    read = svc("queue", "read", task_id, "--reader-id", "ann", api=served_api)
    assert read.returncode == 0, read.stderr
    assert read.stdout.startswith(f"marked read: {task_id} up to v1 for reader ann")
    dry = svc("queue", "read", task_id, "--reader-id", "bob", "--dry-run", api=served_api)
    assert "marked read" not in dry.stdout and "nothing changed" in dry.stdout

    dispatch_and_wait(served_api, task_id, "failed")
    first = svc("queue", "retry", task_id, "--idempotency-key", "k-1", "--reason", "flaky",
                api=served_api)
    assert first.returncode == 0, first.stderr
    assert "replayed" not in first.stdout
    again = svc("queue", "retry", task_id, "--idempotency-key", "k-1", "--reason", "flaky",
                api=served_api)
    assert again.returncode == 0, again.stderr
    assert first.stdout.split()[0] == again.stdout.split()[0], "the same attempt"
    assert "replayed: this idempotency key was used before" in again.stdout
    assert "nothing new was created" in again.stdout
    history = json.loads(svc("queue", "attempts", task_id, "--raw", api=served_api).stdout)
    assert [a["retryIndex"] for a in history["items"]] == [0, 1]

    url = f"{served_api}/api/v1/queue/tasks/{task_id}/retry"
    body = {"idempotencyKey": "k-1", "reason": "flaky"}
    replayed = httpx.post(url, json=body)
    assert replayed.headers.get("idempotent-replayed") == "true"
    assert svc("queue", "retry", task_id, "--idempotency-key", "k-1", "--reason", "flaky",
               "--raw", api=served_api).stdout == replayed.text + "\n", "--raw stays the JSON"

    submitted = svc("queue", "submit", "--json-stdin", "--idempotency-key", "sub-1",
                    api=served_api, stdin=json.dumps(task_body(title="Once")))
    assert "replayed" not in submitted.stdout
    resubmitted = svc("queue", "submit", "--json-stdin", "--idempotency-key", "sub-1",
                      api=served_api, stdin=json.dumps(task_body(title="Once")))
    assert "replayed: this idempotency key was used before" in resubmitted.stdout


async def test_duration_is_the_backends_own_not_the_refreshs(served_api: str) -> None:
    """The backend sleeps 0.4 s; the refresh comes 2.5 s after it ended: the attempt shows
    the backend's span, dated by its job."""
    task_id = submit(served_api, payload={"prompt": "sleep: 0.4"})
    assert svc("queue", "dispatch", task_id, api=served_api).returncode == 0
    session = session_of(served_api, task_id)
    for _ in range(300):
        if "backend-exit" in svc("sessions", "trace", session, api=served_api).stdout:
            break
        time.sleep(0.1)
    ended_by = datetime.now().astimezone()
    time.sleep(2.5)
    refreshed = json.loads(svc("queue", "refresh", task_id, "--raw", api=served_api).stdout)
    assert refreshed["state"] == "completed"
    [attempt] = json.loads(svc("queue", "attempts", task_id, "--raw",
                               api=served_api).stdout)["items"]
    assert 400 <= attempt["durationMs"] < 1500, attempt
    finished = datetime.fromisoformat(attempt["finishedAt"])
    assert finished <= ended_by, "finishedAt is when the backend ended, not the refresh"
    assert datetime.fromisoformat(attempt["updatedAt"]) > ended_by
    shown = svc("queue", "attempts", task_id, api=served_api).stdout
    assert f"duration={attempt['durationMs']} ms" in shown


async def test_a_task_without_a_profile_shows_the_one_it_runs_on(served_api: str) -> None:
    """Submitted without backendProfile: the task, its attempts and the stats show the
    default profile (profile-1); the stored contract stays as sent."""
    task_id = submit(served_api)
    chosen = submit(served_api, backendProfile="profile-3")
    detail = json.loads(svc("queue", "show", task_id, "--raw", api=served_api).stdout)
    assert detail["backendProfile"] == "profile-1"
    assert "backendProfile" not in detail["contract"], "the contract is stored as sent"
    assert lines_of(svc("queue", "list", api=served_api).stdout, task_id)[0].split()[4] \
        == "profile-1"
    stats = svc("queue", "stats", api=served_api).stdout
    assert "by profile: profile-1=1  profile-3=1" in stats and "none" not in stats
    dispatch_and_wait(served_api, task_id, "completed")
    [attempt] = json.loads(svc("queue", "attempts", task_id, "--raw",
                               api=served_api).stdout)["items"]
    assert attempt["backendProfile"] == "profile-1"
    assert json.loads(svc("queue", "show", chosen, "--raw",
                          api=served_api).stdout)["backendProfile"] == "profile-3"


async def test_sessions_send_takes_a_command_payload(served_api: str, tmp_path: Path) -> None:
    """``sessions send ID --json-stdin|--json-file``: the payload (prompt, threadId) goes to
    the API as written; the API's validation refuses bad ones and nothing changes."""
    sent = svc("sessions", "send", "--prompt", "lines: 1", api=served_api)
    assert sent.returncode == 0, sent.stderr
    session = sent.stdout.split("session=")[1].split()[0]
    wait_session(served_api, session)
    detail = json.loads(svc("sessions", "show", session, "--raw", api=served_api).stdout)
    thread = detail["threadId"]
    assert thread

    payload = json.dumps({"prompt": "lines: 2", "threadId": thread})
    resumed = svc("sessions", "send", session, "--json-stdin", api=served_api, stdin=payload)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumes {thread}" in resumed.stdout
    wait_session(served_api, session)
    path = tmp_path / "payload.json"
    path.write_text(json.dumps({"threadId": thread}))
    from_file = svc("sessions", "send", session, "--json-file", str(path), "--prompt",
                    "lines: 1", api=served_api)
    assert from_file.returncode == 0, from_file.stderr
    assert f"resumes {thread}" in from_file.stdout
    wait_session(served_api, session)
    turns = json.loads(svc("sessions", "show", session, "--raw", api=served_api).stdout)
    assert turns["turns"] == 3

    for stdin, args, code, message in [
        (json.dumps({"prompt": "x", "bogus": 1}), (), 1, "error: invalid-request:"),
        (json.dumps({"threadId": thread}), (), 1, "error: invalid-request:"),
        (json.dumps({"prompt": "x", "threadId": "bad thread"}), (), 1,
         "error: invalid-request:"),
        ("{not json", (), 1, "error: invalid-request: the command payload is not valid JSON"),
        (payload, ("--prompt", "y"), 2, "error: invalid-request: give the prompt in"),
        (payload, ("--prompt-stdin",), 2, "error: invalid-request: standard input"),
    ]:
        refused = svc("sessions", "send", session, "--json-stdin", *args, api=served_api,
                      stdin=stdin)
        assert refused.returncode == code, (stdin, refused.stdout, refused.stderr)
        assert refused.stderr.startswith(message), refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, "one line"
    after = json.loads(svc("sessions", "show", session, "--raw", api=served_api).stdout)
    assert after["turns"] == 3 and after["version"] == turns["version"], "nothing changed"


def test_manifest_validate_reports_missing_fields_once(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text("{}")
    result = svc("manifest", "validate", str(path))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"{path}: 1 violation(s)"
    assert len(lines) == 2 and lines[1].startswith("  $: required fields 'manifestVersion'")
    assert lines[1].endswith("are missing")
