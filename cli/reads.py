"""The client commands' one request-and-print step (:func:`respond`) and the bodies of the
common reads (``svc queue list|show|stats|commander|attempts``), without cyclopts: the
commands of :mod:`cli.queue_cmd` call them with what cyclopts parsed, the fast path
(:mod:`cli.fast`) with what it parsed itself."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from urllib.parse import quote

from api import wire
from cli import render
from cli.client import ApiResponse, ApiUnreachable, Endpoint, call

EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
T = TypeVar("T")


def respond(send: Callable[[], ApiResponse], output: render.Printing,
            kind: type[T], summary: Callable[[T], None]) -> int:
    """Send, then print the answer in the requested form (a dry run's plan, or ``summary``
    of the answer decoded as ``kind``); return the exit status."""
    try:
        response = send()
    except ApiUnreachable as error:
        render.error("infra-failed", str(error))
        return EXIT_UNREACHABLE
    if not response.ok:
        return render.api_error(response)
    if output.raw:
        print(response.text)
    elif output.full:
        render.full(response.data)
    elif isinstance(response.data, dict) and "mutation" in response.data:
        render.plan(response.decoded(wire.DryRun))
    else:
        summary(response.decoded(kind))
        if response.replayed:
            render.out("replayed: this idempotency key was used before; this is its original "
                       "answer, nothing new was created")
    return 0


def task_path(task_id: str, action: str = "") -> str:
    """The API path of a task (or of one of its actions)."""
    return f"/api/v1/queue/tasks/{quote(task_id, safe='')}" + (f"/{action}" if action else "")


def list_tasks(api: Endpoint, output: render.Printing, *, queue: str | None = None,
               state: str | None = None, cursor: str | None = None, limit: int | None = None,
               updated_after: int | None = None) -> int:
    """``svc queue list``: one page of tasks."""
    params = {"queue": queue, "state": state, "cursor": cursor, "limit": limit,
              "updatedAfter": updated_after}
    return respond(lambda: call(api, "GET", "/api/v1/queue/tasks", params=params),
                   output, wire.TaskList, render.task_list)


def show_task(api: Endpoint, output: render.Printing, task_id: str) -> int:
    """``svc queue show`` (not ``--watch``): the task, then with ``--full`` its judge runs."""
    status = respond(lambda: call(api, "GET", task_path(task_id)), output,
                     wire.TaskDetail, render.task_summary)
    if status != 0 or not output.full:
        return status
    return respond(lambda: call(api, "GET", task_path(task_id, "attempts"),
                                params={"limit": 500}),
                   render.Output(), wire.AttemptList, render.judge_runs_full)


def queue_stats(api: Endpoint, output: render.Printing, *, queue: str | None = None) -> int:
    """``svc queue stats``: counts by state, lane and profile; token sums."""
    return respond(lambda: call(api, "GET", "/api/v1/queue/stats", params={"queue": queue}),
                   output, wire.QueueStats, render.stats)


def commander(api: Endpoint, output: render.Printing, *, queue: str | None = None,
              reader_id: str | None = None, limit: int | None = None) -> int:
    """``svc queue commander``: the tasks needing attention first."""
    params = {"queue": queue, "readerId": reader_id, "limit": limit}
    return respond(lambda: call(api, "GET", "/api/v1/queue/commander", params=params),
                   output, wire.CommanderView, render.commander)


def attempts(api: Endpoint, output: render.Printing, task_id: str, *,
             cursor: int | None = None, limit: int | None = None) -> int:
    """``svc queue attempts``: a task's attempt history, oldest first."""
    return respond(lambda: call(api, "GET", task_path(task_id, "attempts"),
                                params={"cursor": cursor, "limit": limit}),
                   output, wire.AttemptList, render.attempt_list)
