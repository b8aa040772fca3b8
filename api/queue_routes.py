"""Routes of ``/api/v1/queue``: each parses, calls one function, answers."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import PathParameter, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from api import views, wire
from api.body import convert, read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from ledger import intake
from ledger.errors import NotFound
from ledger.redaction import redact_text
from ledger.states import AttemptStatus, TaskStatus
from ledger.task import CancelTask, MarkTaskRead, TaskCommand
from ledger.writer import LedgerWriter
from projections import queries
from runner_assembly.assembly import model as assembly

Limit = Annotated[int, QueryParameter(ge=1, le=500)]
TaskId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                       pattern=wire.IDENTIFIER_PATTERN)]
QueueQuery = Annotated[str | None, QueryParameter(name="queue", max_length=128,
                                              pattern=wire.QUEUE_PATTERN)]
ReaderQuery = Annotated[str | None, QueryParameter(name="readerId", max_length=128,
                                              pattern=wire.IDENTIFIER_PATTERN)]
DryRunFlag = Annotated[bool, QueryParameter(name="dryRun")]
Cursor = Annotated[str | None, QueryParameter(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
ACTOR = "api"


async def task_detail(state: State, task_id: str,
                      work_ready: dict[str, Any] | None = None) -> wire.TaskDetail:
    """The task detail from the projections, or ``not-found``."""
    found = await queries.get_task(state.pool, task_id)
    if found is None:
        raise NotFound(f"task {task_id} not found", taskId=task_id)
    row, contract = found
    return views.task_detail(row, contract, state.settings.timeout_budgets, work_ready)


async def _mutate(state: State, name: str, command: TaskCommand,
                  dry_run: bool) -> wire.TaskDetail | wire.DryRun:
    writer: LedgerWriter = state.writer
    if dry_run:
        outcome = await writer.plan(command)
        return views.plan(name, command.task_id, outcome.before, outcome.state, outcome.events)
    outcome = await writer.execute(command, ACTOR)
    latest = outcome.before.latest if isinstance(command, CancelTask) else None
    if latest is not None and latest.state == AttemptStatus.RUNNING and outcome.events:
        attempt = await queries.get_attempt(state.pool, latest.attempt_id)
        if attempt is not None:
            await state.dispatcher.cancel_job(attempt.run_id, attempt.runner_job_id)
    return await task_detail(state, command.task_id)


class QueueController(Controller):
    """Tasks, stats and the commander view."""

    path = "/api/v1/queue"
    tags = ("queue",)

    @post("/tasks", status_code=HTTP_201_CREATED, responses=WRITE_ERRORS)
    async def submit(self, request: Request[Any, Any, Any], state: State,
                     dry_run: DryRunFlag = False) -> Response[wire.TaskDetail | wire.DryRun]:
        """Submit a task: validates the contract and stores it; never schedules."""
        raw = await read_body(request, Any)
        assembly.reject_old_inputs(raw)
        body = convert(raw, wire.SubmitBody)
        assembly.check(body.resource_bundle_ref, body.execution_policy, body.workspace_ref)
        command = intake.submit_command(msgspec.to_builtins(body), actor=ACTOR)
        if dry_run:
            outcome = await state.writer.plan(command)
            plan = views.plan("submit", None, None, outcome.state, outcome.events,
                              payloadHash=command.payload_hash, queue=command.queue,
                              lane=command.lane)
            return Response(plan, status_code=HTTP_200_OK)
        await state.writer.execute(command, ACTOR)
        return Response(await task_detail(state, command.task_id), status_code=HTTP_201_CREATED)

    @get("/tasks", responses=READ_ERRORS)
    async def list_tasks(
        self, state: State, queue: QueueQuery = None,
        task_state: Annotated[TaskStatus | None, QueryParameter(name="state")] = None,
        cursor: Cursor = None, limit: Limit = 50,
        updated_after: Annotated[int | None, QueryParameter(
            name="updatedAfter", ge=0, le=queries.MAX_SEQ)] = None,
    ) -> wire.TaskList:
        """List tasks newest first; with ``updatedAfter`` only those changed after it."""
        page = await queries.list_tasks(state.pool, queue=queue, state=task_state,
                                        cursor=cursor, limit=limit, updated_after=updated_after)
        return views.task_list(page, state.settings.timeout_budgets)

    @get("/tasks/{task_id:str}", responses=READ_ERRORS)
    async def show(self, state: State, task_id: TaskId) -> wire.TaskDetail:
        """The task detail with ``latestAttempt`` and ``sessionPath``."""
        return await task_detail(state, task_id)

    @post("/tasks/{task_id:str}/cancel", status_code=HTTP_200_OK,
          responses=WRITE_ERRORS)
    async def cancel(self, request: Request[Any, Any, Any], state: State, task_id: TaskId,
                     dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Cancel a task (optional ``reason``)."""
        body = await read_body(request, wire.CancelBody, empty_ok=True)
        reason = redact_text(body.reason) if body.reason else None
        return await _mutate(state, "cancel", CancelTask(task_id, reason), dry_run)

    @post("/tasks/{task_id:str}/read", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def read(self, request: Request[Any, Any, Any], state: State, task_id: TaskId,
                   dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Advance ``readerId``'s read cursor to the task's current version."""
        body = await read_body(request, wire.ReadBody)
        return await _mutate(state, "read", MarkTaskRead(task_id, body.reader_id), dry_run)

    @get("/stats", responses=READ_ERRORS)
    async def stats(self, state: State, queue: QueueQuery = None) -> wire.QueueStats:
        """Task counts by queue, lane, state and backend profile."""
        return views.queue_stats(queue, await queries.stats(state.pool, queue))

    @get("/commander", responses=READ_ERRORS)
    async def commander(
        self, state: State, queue: QueueQuery = None,
        reader_id: ReaderQuery = None,
        limit: Annotated[int, QueryParameter(ge=1, le=500)] = 20,
    ) -> wire.CommanderView:
        """The tasks needing attention first, with counts by state and unread flags."""
        result = await queries.commander(state.pool, queue=queue, reader_id=reader_id,
                                         limit=limit)
        return views.commander(queue, reader_id, result, state.settings.timeout_budgets)
