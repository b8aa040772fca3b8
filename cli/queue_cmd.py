"""``svc queue …``: each command parses, calls the API once, renders."""

from __future__ import annotations

import contextlib
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import msgspec
from cyclopts import App, Parameter

from api import wire
from cli import reads, render
from cli.client import ApiResponse, ApiUnreachable, call
from cli.options import ApiOptions
from cli.reads import EXIT_REFUSED as EXIT_REFUSED
from cli.reads import EXIT_UNREACHABLE as EXIT_UNREACHABLE
from cli.reads import EXIT_USAGE as EXIT_USAGE
from cli.reads import respond as respond
from cli.reads import task_path as _task_path
from ledger.states import TaskStatus

queue_app = App(name="queue", help="Submit, list, read and cancel queue tasks.")

DryRun = Annotated[bool, Parameter(help="Plan only: answer what would change, change nothing.")]
T = TypeVar("T")


def read_json_input(json_stdin: bool, json_file: Path | None) -> bytes | None:
    if json_stdin and json_file is not None:
        render.error("invalid-request", "use either --json-stdin or --json-file, not both")
        return None
    if json_stdin or json_file == Path("-"):
        return sys.stdin.buffer.read()
    if json_file is not None:
        try:
            return json_file.read_bytes()
        except OSError as error:
            render.error("invalid-request", f"cannot read {json_file}: {error.strerror}")
            return None
    render.error("invalid-request", "give the task with --json-stdin (preferred) or --json-file")
    return None


def post_json(path: str, body: bytes, dry_run: bool, api: ApiOptions | None,
              output: render.OutputOptions | None, kind: type[T],
              summary: Callable[[T], None]) -> int:
    """POST ``body`` to ``path`` (a dry run with ``dry_run``) and print the answer as ``kind``."""
    return respond(lambda: call(api or ApiOptions(), "POST", path,
                                params={"dryRun": dry_run or None}, body=body),
                   output or render.OutputOptions(), kind, summary)


@queue_app.command
def submit(
    *,
    json_stdin: Annotated[bool, Parameter(help="Read the task JSON from standard input.")] = False,
    json_file: Annotated[Path | None, Parameter(
        help="Read the task JSON from a file (--json-file=- reads standard input).")] = None,
    idempotency_key: Annotated[str | None, Parameter(
        help="Idempotency-Key of the submit (default: a fresh one). Submitting again with "
             "the same key and body answers the original task. Several tasks: item N "
             "takes KEY-N.")] = None,
    dry_run: DryRun = False, api: ApiOptions | None = None,
    output: render.OutputOptions | None = None,
) -> int:
    """Submit a task. It waits in its queue until dispatched; nothing is scheduled.

    The JSON needs tenantId, projectId, queue, title and payload.prompt.

    Example: one task from standard input

      echo '{"tenantId": "t", "projectId": "p", "queue": "main",
             "title": "Fix", "payload": {"prompt": "…"}}' |
        svc queue submit --json-stdin

    Several tasks at once: a JSON array of them, or JSON lines (one task a line). They are
    sent in batches of up to 500, each batch stored all or none, and their ids printed one
    a line in the order given.
    """
    body = read_json_input(json_stdin, json_file)
    if body is None:
        return EXIT_USAGE
    key = idempotency_key or f"cli-{uuid.uuid4().hex}"
    tasks = several_tasks(body)
    if tasks is not None:
        return submit_batches(api or ApiOptions(), tasks, key, dry_run,
                              output or render.OutputOptions())
    return respond(lambda: submit_once_more_if_unknown(api or ApiOptions(), body, key, dry_run),
                   output or render.OutputOptions(),
                   wire.TaskDetail, render.task_summary)


def submit_once_more_if_unknown(api: ApiOptions, body: bytes, key: str,
                                dry_run: bool) -> ApiResponse:
    """Submit under ``key``; when the commit's outcome is unknown (503 ``commit-unknown``),
    send it once more with the same key: it stores the task or answers the stored one."""
    def send() -> ApiResponse:
        return call(api, "POST", "/api/v1/queue/tasks", params={"dryRun": dry_run or None},
                    body=body, headers={"Idempotency-Key": key})

    response = send()
    if response.error_code == "commit-unknown":
        response = send()
    return response


def several_tasks(body: bytes) -> list[object] | None:
    """The tasks of a JSON array, or of JSON lines (two or more lines, each one object);
    None for anything else, which is one task, sent as it is."""
    text = body.strip()
    if text.startswith(b"["):
        with contextlib.suppress(msgspec.DecodeError):
            value = msgspec.json.decode(text)
            return value if isinstance(value, list) else None
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or _is_json(text):  # one task written over several lines
        return None
    with contextlib.suppress(msgspec.DecodeError):
        values = [msgspec.json.decode(line) for line in lines]
        return values if all(isinstance(value, dict) for value in values) else None
    return None


def _is_json(text: bytes) -> bool:
    try:
        msgspec.json.decode(text)
    except msgspec.DecodeError:
        return False
    return True


def submit_batches(api: ApiOptions, tasks: list[object], key: str, dry_run: bool,
                   output: render.OutputOptions) -> int:
    """Submit ``tasks`` in batches of up to :data:`wire.MAX_BATCH` (item N under key
    ``key-N``), printing each batch's answer: the task ids, one a line, by default. Stops at
    the first batch refused (the batches before it stay stored)."""
    if not tasks:
        render.error("invalid-request", "the input holds no task")
        return EXIT_REFUSED
    for start in range(0, len(tasks), wire.MAX_BATCH):
        items = [{"idempotencyKey": f"{key}-{index}", "task": task}
                 for index, task in enumerate(tasks[start:start + wire.MAX_BATCH], start)]
        try:
            response = _send_batch(api, msgspec.json.encode({"items": items}), dry_run)
        except ApiUnreachable as error:
            render.error("infra-failed", str(error))
            return EXIT_UNREACHABLE
        if not response.ok:
            index = _refused_index(response)
            if index is not None:
                render.warn(f"refused at task {start + index} of the input (from 0)"
                            + (f"; the {start} before it are stored" if start else ""))
            return render.api_error(response)
        _print_batch(response, output)
    return 0


def _refused_index(response: ApiResponse) -> int | None:
    """The index a refused batch names (``details.index``), if any."""
    error = response.data.get("error") if isinstance(response.data, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    index = details.get("index") if isinstance(details, dict) else None
    return index if isinstance(index, int) else None


def _send_batch(api: ApiOptions, body: bytes, dry_run: bool) -> ApiResponse:
    """POST one batch; when its outcome is unknown, once more (the same keys)."""
    def send() -> ApiResponse:
        return call(api, "POST", "/api/v1/queue/tasks/batch",
                    params={"dryRun": dry_run or None}, body=body)

    response = send()
    if response.error_code == "commit-unknown":
        response = send()
    return response


def _print_batch(response: ApiResponse, output: render.OutputOptions) -> None:
    if output.raw:
        print(response.text)
    elif output.full or not isinstance(response.data, dict) or "items" not in response.data:
        render.full(response.data)  # a dry run's plans too
    else:
        for task in response.decoded(wire.BatchSubmitResult).items:
            render.out(task.task_id)


@queue_app.command(name="list")
def list_tasks(
    *, queue: Annotated[str | None, Parameter(help="Queue name, or name/lane.")] = None,
    state: Annotated[TaskStatus | None, Parameter(
        help="Only tasks in this state (default: every state).")] = None,
    cursor: Annotated[str | None, Parameter(help="Continue from a previous page.")] = None,
    limit: Annotated[int | None, Parameter(help="Page size (default 50, at most 500).")] = None,
    updated_after: Annotated[int | None, Parameter(
        help="Only tasks changed after this changeSeq (for polling).")] = None,
    api: ApiOptions | None = None, output: render.OutputOptions | None = None,
) -> int:
    """List tasks, newest change first (oldest first with --updated-after).

    Example: svc queue list --queue main --state failed
    """
    return reads.list_tasks(api or ApiOptions(), output or render.OutputOptions(),
                            queue=queue, state=state, cursor=cursor, limit=limit,
                            updated_after=updated_after)


@queue_app.command
def show(task_id: str, *, watch: Annotated[bool, Parameter(
        name=["--watch", "-w"],
        help="Print each new version of the task (a higher changeSeq) as it comes, one line "
             "each (--raw: one JSON object a line), until it is completed, cancelled, failed "
             "or blocked; goes on across server restarts; Ctrl-C stops (exit 130).")] = False,
         api: ApiOptions | None = None, output: render.OutputOptions | None = None) -> int:
    """Show one task: state, summary, latest attempt and session path (with --full, every
    field, then the judge runs of its attempts).

    Example: svc queue show tsk_… --watch

    A watch ends at completed, cancelled, failed or blocked (a failed or blocked task
    changes again only by a retry or a cancel); its exit status is 0 whatever the state.
    """
    options, shown = api or ApiOptions(), output or render.OutputOptions()
    if watch:
        from cli.follow import Task, follow

        return follow(options, Task(options, _task_path(task_id), shown))
    return reads.show_task(options, shown, task_id)


@queue_app.command
def stats(*, queue: Annotated[str | None, Parameter(help="Queue name, or name/lane.")] = None,
          api: ApiOptions | None = None, output: render.OutputOptions | None = None) -> int:
    """Task counts by state, lane and backend profile; token usage per queue and profile.

    Example: svc queue stats --queue main
    """
    return reads.queue_stats(api or ApiOptions(), output or render.OutputOptions(),
                             queue=queue)


@queue_app.command
def commander(
    *, queue: Annotated[str | None, Parameter(help="Queue name, or name/lane.")] = None,
    reader_id: Annotated[str | None, Parameter(help="Mark tasks unread for this reader.")] = None,
    limit: Annotated[int | None, Parameter(help="How many tasks to display (default 20).")] = None,
    api: ApiOptions | None = None, output: render.OutputOptions | None = None,
) -> int:
    """The tasks needing attention first (blocked, failed, running, pending), with counts.

    Example: svc queue commander --queue main --reader-id me
    """
    return reads.commander(api or ApiOptions(), output or render.OutputOptions(),
                           queue=queue, reader_id=reader_id, limit=limit)


@queue_app.command
def read(task_id: str, *,
         reader_id: Annotated[str, Parameter(env_var="SVC_READER_ID",
                                             help="Whose read cursor to advance.")] = "cli",
         dry_run: DryRun = False, api: ApiOptions | None = None,
         output: render.OutputOptions | None = None) -> int:
    """Mark a task read up to its current version for a reader.

    Example: svc queue read tsk_… --reader-id me
    """
    import msgspec

    body = msgspec.json.encode({"readerId": reader_id})
    return post_json(_task_path(task_id, "read"), body, dry_run, api, output, wire.TaskDetail,
                     render.marked_read(reader_id))


@queue_app.command
def cancel(task_id: str, *,
           reason: Annotated[str | None, Parameter(help="Why, kept on the task.")] = None,
           dry_run: DryRun = False, api: ApiOptions | None = None,
           output: render.OutputOptions | None = None) -> int:
    """Cancel a pending, running, failed or blocked task.

    Example: svc queue cancel tsk_… --reason "superseded"
    """
    import msgspec

    body = msgspec.json.encode({"reason": reason} if reason else {})
    return _post_task(task_id, "cancel", body, dry_run, api, output)


def _post_task(task_id: str, action: str, body: bytes, dry_run: bool, api: ApiOptions | None,
               output: render.OutputOptions | None) -> int:
    """POST an action on a task and print the task it leaves (or the dry run's plan)."""
    return post_json(_task_path(task_id, action), body, dry_run, api, output, wire.TaskDetail,
                     render.task_summary)


@queue_app.command
def dispatch(
    task_id: str, *,
    json_stdin: Annotated[bool, Parameter(
        help='Read the dispatch body from standard input, e.g. {"attemptId": "att_1"}.')] = False,
    json_file: Annotated[Path | None, Parameter(help="Read the dispatch body from a file.")] = None,
    dry_run: DryRun = False, api: ApiOptions | None = None,
    output: render.OutputOptions | None = None,
) -> int:
    """Dispatch a pending task: reserve its attempt, create its run and runner job.

    Repeating a dispatch with the same attemptId returns the same attempt and creates
    nothing new. Failed and blocked tasks are retried with `svc queue retry`, not dispatched.

    Example: echo '{"attemptId": "att_1"}' | svc queue dispatch tsk_… --json-stdin
    """
    body = b"{}"
    if json_stdin or json_file is not None:
        read = read_json_input(json_stdin, json_file)
        if read is None:
            return EXIT_USAGE
        body = read
    return _post_task(task_id, "dispatch", body, dry_run, api, output)


@queue_app.command
def refresh(task_id: str, *, dry_run: DryRun = False, api: ApiOptions | None = None,
            output: render.OutputOptions | None = None) -> int:
    """Write the run's terminal state back to the task (no-op while it still runs).

    Example: svc queue refresh tsk_…
    """
    return _post_task(task_id, "refresh", b"{}", dry_run, api, output)


@queue_app.command
def attempts(
    task_id: str, *,
    cursor: Annotated[int | None, Parameter(help="First retry index to show.")] = None,
    limit: Annotated[int | None, Parameter(help="Page size (default 50, at most 500).")] = None,
    api: ApiOptions | None = None, output: render.OutputOptions | None = None,
) -> int:
    """The attempt history of a task, oldest first.

    Example: svc queue attempts tsk_… --raw
    """
    return reads.attempts(api or ApiOptions(), output or render.OutputOptions(), task_id,
                          cursor=cursor, limit=limit)


@queue_app.command
def judge(
    task_id: str, attempt_id: str, *,
    json_stdin: Annotated[bool, Parameter(help="Read the verdict JSON from standard input.")]
    = False,
    json_file: Annotated[Path | None, Parameter(help="Read the verdict JSON from a file.")]
    = None,
    dry_run: DryRun = False, api: ApiOptions | None = None,
    output: render.OutputOptions | None = None,
) -> int:
    """Record a judge's verdict on an ended attempt. It never retries the task.

    The JSON needs judge, request and result (pass, fail, inconclusive);
    failureKind, retrySuggested, retryReason, summary, judgeId are optional.

    Example: a failing verdict that suggests a retry

      echo '{"judge": "ci", "request": {"check": "tests"},
             "result": "fail", "retrySuggested": true}' |
        svc queue judge <taskId> <attemptId> --json-stdin
    """
    from urllib.parse import quote

    body = read_json_input(json_stdin, json_file)
    if body is None:
        return EXIT_USAGE
    path = _task_path(task_id, f"attempts/{quote(attempt_id, safe='')}/judge")
    return post_json(path, body, dry_run, api, output, wire.JudgeRun, render.judge_run)


@queue_app.command
def retry(
    task_id: str, *,
    idempotency_key: Annotated[str, Parameter(
        help="Names this retry: repeating it returns the same attempt.")],
    reason: Annotated[str, Parameter(help="Why the task is retried (kept on the attempt).")],
    dry_run: DryRun = False, api: ApiOptions | None = None,
    output: render.OutputOptions | None = None,
) -> int:
    """Retry a failed or blocked task with a new attempt.

    The same --idempotency-key with the same --reason returns the original attempt (and
    resumes it if its runner job was never created); with another reason it is a conflict.

    Example: svc queue retry tsk_… --idempotency-key retry-1 --reason "flaky network"
    """
    import msgspec

    body = msgspec.json.encode({"idempotencyKey": idempotency_key, "reason": reason})
    return post_json(_task_path(task_id, "retry"), body, dry_run, api, output, wire.Attempt,
                     render.attempt_summary)
