"""Routes that create and track attempts: dispatch, refresh, attempt history, retry."""

from __future__ import annotations

from litestar import Controller, Response, get, post
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from api import examples, wire
from api.access import role
from api.body import read_body
from api.errors import OPENING_ERRORS, READ_ERRORS, WRITE_ERRORS
from api.openapi import also_ok, body, command
from api.params import (
    AttemptId,
    Caller,
    DryRunFlag,
    HttpRequest,
    Limit,
    QueueDep,
    RetryCursor,
    TaskId,
)
from runner_assembly.assembly import model


class AttemptController(Controller):
    """Dispatch, refresh, attempts and retry of one task."""

    path = "/api/v1/queue/tasks/{task_id:str}"
    tags = ("queue",)

    @command("/dispatch", wire.DispatchBody, examples.DISPATCH, OPENING_ERRORS, required=False,
             access=role("operator"))
    async def dispatch_task(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                       task_id: TaskId,
                       dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Reserve the attempt, then create its run, command and runner job."""
        body = await read_body(request, wire.DispatchBody, empty_ok=True, gate=model.gate)
        answer = queue_api.preview_dispatch if dry_run or body.dry_run else queue_api.dispatch
        return await answer(caller, task_id, body)

    @post("/refresh", status_code=HTTP_200_OK, responses=WRITE_ERRORS, opt=role("operator"))
    async def refresh_task(self, queue_api: QueueDep, caller: Caller, task_id: TaskId,
                      dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Write the core run's terminal state back to the task; no-op while it runs."""
        answer = queue_api.preview_refresh if dry_run else queue_api.refresh
        return await answer(caller, task_id)

    @get("/attempts", responses=READ_ERRORS)
    async def list_attempts(self, queue_api: QueueDep, caller: Caller, task_id: TaskId,
                       cursor: RetryCursor = 0, limit: Limit = 50) -> wire.AttemptList:
        """The formal attempt history, oldest first; ``cursor`` is a retry index."""
        return await queue_api.attempts(caller, task_id, cursor, limit)

    @post("/attempts/{attempt_id:str}/judge", status_code=HTTP_201_CREATED,
          responses=WRITE_ERRORS,
          opt=body(wire.JudgeBody, examples.JUDGE)
          | also_ok("dry run, or the original record of the same verdict sent again")
          | role("judge"))
    async def judge_attempt(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                    task_id: TaskId,
                    attempt_id: AttemptId, dry_run: DryRunFlag = False
                    ) -> Response[wire.JudgeRun | wire.DryRun]:
        """Record a judge's verdict on an ended attempt (SPEC 2.3); it never retries."""
        body = await read_body(request, wire.JudgeBody)
        answer = queue_api.preview_judge if dry_run or body.dry_run else queue_api.judge
        return await answer(caller, task_id, attempt_id, body)

    @command("/retry", wire.RetryBody, examples.RETRY, WRITE_ERRORS, access=role("operator"))
    async def retry_task(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                    task_id: TaskId,
                    dry_run: DryRunFlag = False) -> Response[wire.Attempt | wire.DryRun]:
        """Retry a failed or blocked task under an idempotency key (SPEC 4.3 rule 6).

        A key already used with the same reason answers its original attempt, with header
        ``Idempotent-Replayed: true``.
        """
        body = await read_body(request, wire.RetryBody)
        answer = queue_api.preview_retry if dry_run or body.dry_run else queue_api.retry
        return await answer(caller, task_id, body)
