"""Routes of ``/api/v1/queue``: each parses, calls one function, answers."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, Response, get, post
from litestar.params import HeaderParameter
from litestar.status_codes import HTTP_201_CREATED

from api import examples, wire
from api.access import role
from api.batch_body import read_batch
from api.body import read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from api.location import Located
from api.openapi import also_ok, body, command
from api.params import (
    Caller,
    CommanderLimit,
    Cursor,
    DryRunFlag,
    HttpRequest,
    Limit,
    QueueDep,
    QueueQuery,
    ReaderQuery,
    TaskId,
    TaskStateQuery,
    UpdatedAfter,
)
from runner_assembly.assembly import model as assembly

IdempotencyKey = Annotated[str | None, HeaderParameter(
    name="Idempotency-Key", min_length=1, max_length=128, pattern=wire.IDENTIFIER_PATTERN,
    description="Per tenant: the same key and body answer the original task (200, header "
                "Idempotent-Replayed: true); another body is 409 idempotency-conflict.")]


class QueueController(Controller):
    """Tasks, stats and the commander view."""

    path = "/api/v1/queue"
    tags = ("queue",)

    @post("/tasks", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS,
          after_request=Located("/api/v1/queue/tasks/{taskId}"),
          opt=body(wire.SubmitBody, examples.SUBMIT)
          | also_ok("dry run (the plan), or the original task of a replayed Idempotency-Key")
          | role("submitter"))
    async def submit_task(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                     dry_run: DryRunFlag = False,
                     idempotency_key: IdempotencyKey = None
                     ) -> Response[wire.TaskDetail | wire.DryRun]:
        """Submit a task: validates the contract and stores it; never schedules.

        With an ``Idempotency-Key`` already used (per tenant) with the same body, the answer
        is the original task: 200 with header ``Idempotent-Replayed: true``.
        """
        body = await read_body(request, wire.SubmitBody, gate=assembly.gate)
        answer = queue_api.preview_submit if dry_run else queue_api.submit
        return await answer(caller, body, idempotency_key)

    @post("/tasks/batch", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS,
          opt=body(wire.BatchSubmitBody, examples.SUBMIT_BATCH)
          | also_ok("dry run (the plans), or every item replayed an earlier submit")
          | role("submitter"))
    async def submit_task_batch(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                           dry_run: DryRunFlag = False
                           ) -> Response[wire.BatchSubmitResult | wire.DryRun]:
        """Submit up to 500 tasks in one transaction, each under its own idempotency key
        (the header's rules per item): all are stored or none. An invalid item, or a key
        used with another body, refuses the batch and names the item (``details.index``).
        """
        tasks = await read_batch(request)
        if dry_run:
            return Response(await queue_api.preview_submit_batch(caller, tasks),
                            status_code=200)
        return await queue_api.submit_batch(caller, tasks)

    @get("/tasks", responses=READ_ERRORS)
    async def list_tasks(
        self, queue_api: QueueDep, caller: Caller, queue: QueueQuery = None,
        task_state: TaskStateQuery = None, cursor: Cursor = None, limit: Limit = 50,
        updated_after: UpdatedAfter = None,
    ) -> Response[wire.TaskList]:
        """List tasks newest first; with ``updatedAfter`` only those changed after it."""
        return await queue_api.list_tasks(caller, queue, task_state, cursor, limit, updated_after)

    @get("/tasks/{task_id:str}", responses=READ_ERRORS)
    async def show_task(self, queue_api: QueueDep, caller: Caller,
                   task_id: TaskId) -> Response[wire.TaskDetail]:
        """The task detail with ``latestAttempt`` and ``sessionPath``."""
        return await queue_api.show(caller, task_id)

    @command("/tasks/{task_id:str}/cancel", wire.CancelBody, examples.CANCEL, WRITE_ERRORS,
              required=False, access=role("operator"))
    async def cancel_task(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                     task_id: TaskId,
                     dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Cancel a task (optional ``reason``)."""
        body = await read_body(request, wire.CancelBody, empty_ok=True)
        reason = body.reason or None
        answer = queue_api.preview_cancel if dry_run else queue_api.cancel
        return await answer(caller, task_id, reason)

    @command("/tasks/{task_id:str}/read", wire.ReadBody, examples.READ, WRITE_ERRORS,
             access=role("submitter"))
    async def mark_task_read(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                   task_id: TaskId,
                   dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Advance ``readerId``'s read cursor to the task's current version."""
        body = await read_body(request, wire.ReadBody)
        answer = queue_api.preview_read if dry_run else queue_api.read
        return await answer(caller, task_id, body.reader_id)

    @get("/stats", responses=READ_ERRORS)
    async def queue_stats(self, queue_api: QueueDep, caller: Caller,
                    queue: QueueQuery = None) -> Response[wire.QueueStats]:
        """Task counts by queue, lane, state and backend profile."""
        return await queue_api.stats(caller, queue)

    @get("/commander", responses=READ_ERRORS)
    async def commander_view(self, queue_api: QueueDep, caller: Caller, queue: QueueQuery = None,
                        reader_id: ReaderQuery = None,
                        limit: CommanderLimit = 20) -> Response[wire.CommanderView]:
        """The tasks needing attention first, with counts by state and unread flags."""
        return await queue_api.commander(caller, queue, reader_id, limit)
