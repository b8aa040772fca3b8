"""The typed services the routes receive: orchestration calls and projection reads,
answered as wire types. Built once when the app starts; handlers only parse and call."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import asyncpg
import msgspec
from litestar import Response
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED
from prometheus_client import Counter

from api import session_wire as sw
from api import views, wire
from api.auth_principal import acting_as
from api.batch_body import BatchTasks
from api.observability import Metrics
from api.read_cache import ReadCache, SharedHead, encoded
from api.scoping import EVERYTHING, Scope, check_body, require_visible
from ledger import intake, session_lines
from ledger.errors import DomainError, InvalidRequest, NotFound
from ledger.events import JudgeVerdict
from ledger.ids import new_id
from ledger.session import CancelSession, MarkSessionRead
from ledger.states import SessionFilter, SessionStatus
from ledger.task import CancelTask, MarkTaskRead, RecordJudge, SubmitTask
from projections import queries, session_queries
from projections.store import committed_task
from runner_assembly.assembly.capability import work_ready_summary
from runner_assembly.orchestration.dispatch import Dispatcher
from runner_assembly.orchestration.preview import Preview
from runner_assembly.orchestration.queue_service import ACTOR, QueueService
from runner_assembly.orchestration.refresh import Refresher
from runner_assembly.orchestration.session_commands import NewCommand, SessionCommands
from runner_assembly.orchestration.session_service import NewSession, SessionService
from runner_assembly.settings import RunnerSettings

DEFAULT_READER = "default"
SubmitAnswer = Response[wire.TaskDetail | wire.DryRun]
"""What ``POST /queue/tasks`` answers: the task, or a dry run's plan."""
JudgeAnswer = Response[wire.JudgeRun | wire.DryRun]
RetryAnswer = Response[wire.Attempt | wire.DryRun]
SessionAnswer = Response[sw.SessionDetail | wire.DryRun]
CommandAnswer = Response[sw.CommandResult | wire.DryRun]
REPLAYED_HEADER = "Idempotent-Replayed"


def dry_run(preview: Preview) -> wire.DryRun:
    """The dry-run answer of a preview."""
    return views.plan(preview.operation, preview.task_id, preview.before, preview.after,
                      preview.events, **preview.extra)


@contextmanager
def counted(counter: Counter) -> Iterator[Callable[[str], None]]:
    """Count one call by outcome: the attempt state it left, or the error code it raised."""
    def outcome_of(label: str) -> None:
        counter.labels(label).inc()

    try:
        yield outcome_of
    except DomainError as error:
        outcome_of(error.code)
        raise


def _replayed(replayed: bool) -> dict[str, str]:
    """The header that marks the answer of an idempotent replay (DESIGN 10)."""
    return {REPLAYED_HEADER: "true"} if replayed else {}


def _found(stored: dict[str, tuple[Any, Any]], task_id: str) -> tuple[Any, Any]:
    """A task read by :func:`queries.get_tasks`, or ``not-found``."""
    if task_id not in stored:
        raise NotFound(f"task {task_id} not found", taskId=task_id)
    return stored[task_id]


@dataclass(eq=False)
class QueueApi:
    """Tasks, attempts and runner jobs, as the queue and runs routes answer them."""

    pool: asyncpg.Pool
    settings: RunnerSettings
    queue: QueueService
    dispatcher: Dispatcher
    refresher: Refresher
    metrics: Metrics
    cache: ReadCache = field(default_factory=ReadCache, init=False)
    head: SharedHead = field(init=False)

    def __post_init__(self) -> None:
        self.head = SharedHead(self.pool)

    async def task_detail(self, task_id: str, work_ready: dict[str, object] | None = None,
                          scope: Scope = EVERYTHING) -> wire.TaskDetail:
        """The task detail from the projections, or ``not-found`` (also when ``scope`` does
        not see it)."""
        found = await queries.get_task(self.pool, task_id)
        if found is None or not scope.sees(found[0].tenant_id, found[0].project_id):
            raise NotFound(f"task {task_id} not found", taskId=task_id)
        row, contract = found
        return views.task_detail(row, contract, self.settings.timeout_budgets, work_ready)

    def _submit_command(self, scope: Scope, body: wire.SubmitBody,
                        idempotency_key: str | None) -> SubmitTask:
        """The submit command, once the body names the caller's tenant and projects and the
        tenant's secret grants allow its contract."""
        check_body(scope, body.tenant_id, body.project_id)
        command = intake.submit_command(msgspec.to_builtins(body), actor=acting_as(ACTOR),
                                        idempotency_key=idempotency_key,
                                        default_profile=self.settings.default_profile)
        self.queue.planner.check_grants(command.contract)
        return command

    async def preview_submit(self, scope: Scope, body: wire.SubmitBody,
                             idempotency_key: str | None = None) -> SubmitAnswer:
        """The dry run of a submit (200; ``Idempotent-Replayed`` when the key replays)."""
        preview = await self.queue.preview_submit(
            self._submit_command(scope, body, idempotency_key))
        return Response(dry_run(preview), status_code=HTTP_200_OK,
                        headers=_replayed(bool(preview.extra["idempotentReplay"])))

    async def submit(self, scope: Scope, body: wire.SubmitBody,
                     idempotency_key: str | None = None) -> SubmitAnswer:
        """Store a validated task (201). Under an idempotency key already used with the same
        body: the original task (200, ``Idempotent-Replayed``)."""
        command = self._submit_command(scope, body, idempotency_key)
        result = await self.queue.submit(command)
        row = committed_task(command.task_id, result.entries)
        if row is None:  # an idempotent replay: the original task, as stored
            return encoded(await self.task_detail(command.task_id), HTTP_200_OK, _replayed(True))
        # A new task is answered from what its transaction committed, not read back.
        return encoded(views.task_detail(row, command.contract, self.settings.timeout_budgets),
                       HTTP_201_CREATED)

    async def submit_batch(self, scope: Scope, tasks: BatchTasks) -> Response[Any]:
        """Store validated tasks, each under its own key, all or none in one transaction:
        their details in order, 201 when any was created, 200 when every one replayed an
        earlier submit. A refusal names its item (``details.index``); nothing is stored."""
        commands = self._batch_commands(scope, tasks)
        outcomes = await self.queue.writer.execute_all(commands, ACTOR, atomic=True)
        rows = [committed_task(c.task_id, o.entries) for c, o in zip(commands, outcomes,
                                                                     strict=True)]
        # The replayed items' original tasks, as stored: read in one query, not one each.
        stored = await queries.get_tasks(self.pool, [command.task_id for command, row
                                                     in zip(commands, rows, strict=True)
                                                     if row is None])
        budgets = self.settings.timeout_budgets
        details = [views.task_detail(row, command.contract, budgets) if row is not None
                   else views.task_detail(*_found(stored, command.task_id), budgets)
                   for command, row in zip(commands, rows, strict=True)]
        created = any(outcome.entries for outcome in outcomes)
        return encoded(wire.BatchSubmitResult(details),
                       HTTP_201_CREATED if created else HTTP_200_OK)

    def _batch_commands(self, scope: Scope, tasks: BatchTasks) -> list[SubmitTask]:
        """The submit command of each item; a refused one names its ``details.index``."""
        commands = []
        for index, (key, body) in enumerate(tasks):
            try:
                commands.append(self._submit_command(scope, body, key))
            except DomainError as refusal:
                refusal.details["index"] = index
                raise
        return commands

    async def preview_submit_batch(self, scope: Scope, tasks: BatchTasks) -> wire.DryRun:
        """The dry run of a batch submit: each item's plan, in order (200)."""
        commands = self._batch_commands(scope, tasks)
        outcomes = await self.queue.writer.plan_all(commands)
        plans = []
        for command, outcome in zip(commands, outcomes, strict=True):
            replayed = not outcome.events
            plans.append(dry_run(Preview.of(
                "submit", command.task_id if replayed else None, outcome,
                payloadHash=command.payload_hash, queue=command.queue, lane=command.lane,
                idempotentReplay=replayed)).plan)
        return wire.DryRun(mutation=False, plan={"command": "submit-batch", "items": plans})

    async def cancel(self, scope: Scope, task_id: str, reason: str | None) -> wire.TaskDetail:
        """Cancel a task (stopping its running job)."""
        await require_visible(self.pool, scope, "task", task_id)
        await self.queue.mutate(CancelTask(task_id, reason))
        return await self.task_detail(task_id)

    async def preview_cancel(self, scope: Scope, task_id: str,
                             reason: str | None) -> wire.DryRun:
        """The dry run of a cancel."""
        await require_visible(self.pool, scope, "task", task_id)
        return dry_run(await self.queue.preview_mutate("cancel", CancelTask(task_id, reason)))

    async def read(self, scope: Scope, task_id: str, reader_id: str) -> wire.TaskDetail:
        """Advance a reader's cursor."""
        await require_visible(self.pool, scope, "task", task_id)
        await self.queue.mutate(MarkTaskRead(task_id, reader_id))
        return await self.task_detail(task_id)

    async def preview_read(self, scope: Scope, task_id: str, reader_id: str) -> wire.DryRun:
        """The dry run of marking a task read."""
        await require_visible(self.pool, scope, "task", task_id)
        return dry_run(await self.queue.preview_mutate("read",
                                                       MarkTaskRead(task_id, reader_id)))

    async def show(self, scope: Scope, task_id: str) -> Response[Any]:
        """The task detail (``GET``), encoded once per ledger head and scope."""
        async def compute() -> tuple[int, wire.TaskDetail]:
            return head, await self.task_detail(task_id, scope=scope)

        head = await self.head.read()
        return await self.cache.answer(scope, ("show", task_id), head, compute)

    async def list_tasks(self, scope: Scope, queue: str | None, state: str | None,
                         cursor: str | None, limit: int,
                         updated_after: int | None) -> Response[Any]:
        """A page of tasks, newest first; encoded once per ledger head."""
        async def compute() -> tuple[int, wire.TaskList]:
            page = await queries.list_tasks(self.pool, queue=queue, state=state, cursor=cursor,
                                            limit=limit, updated_after=updated_after,
                                            scope=scope)
            return page.high_water, views.task_list(page, self.settings.timeout_budgets)

        key = ("list", queue, state, cursor, limit, updated_after)
        return await self.cache.answer(scope, key, await self.head.read(), compute)

    async def stats(self, scope: Scope, queue: str | None) -> Response[Any]:
        """Task counts by queue, lane, state and backend profile; once per ledger head."""
        async def compute() -> tuple[int, wire.QueueStats]:
            async with self.pool.acquire() as conn, conn.transaction(
                    isolation="repeatable_read", readonly=True):  # one snapshot for both
                result = await queries.stats(conn, queue, scope)
                by_queue, by_profile = await queries.token_stats(conn, queue, scope)
            result = dataclasses.replace(result, tokens_by_queue=by_queue,
                                         tokens_by_profile=by_profile)
            return result.high_water, views.queue_stats(queue, result)

        return await self.cache.answer(scope, ("stats", queue), await self.head.read(),
                                       compute)

    async def commander(self, scope: Scope, queue: str | None, reader_id: str | None,
                        limit: int) -> Response[Any]:
        """The tasks needing attention first; encoded once per ledger head."""
        async def compute() -> tuple[int, wire.CommanderView]:
            result = await queries.commander(self.pool, queue=queue, reader_id=reader_id,
                                             limit=limit, scope=scope)
            return result.stats.high_water, views.commander(
                queue, reader_id, result, self.settings.timeout_budgets)

        key = ("commander", queue, reader_id, limit)
        return await self.cache.answer(scope, key, await self.head.read(), compute)

    async def dispatch(self, scope: Scope, task_id: str,
                       body: wire.DispatchBody) -> wire.TaskDetail:
        """Dispatch the task (counted by outcome)."""
        await require_visible(self.pool, scope, "task", task_id)
        with counted(self.metrics.dispatches) as outcome_of:
            await self.dispatcher.dispatch(task_id, body.attempt_id,
                                           dict(body.transient_env or {}))
            detail = await self.task_detail(task_id, work_ready_summary())
            outcome_of(detail.latest_attempt.state if detail.latest_attempt else "none")
            return detail

    async def preview_dispatch(self, scope: Scope, task_id: str,
                               body: wire.DispatchBody) -> wire.DryRun:
        """The dry run of a dispatch: the reservation and the job's plan."""
        await require_visible(self.pool, scope, "task", task_id)
        return dry_run(await self.dispatcher.preview_dispatch(
            task_id, body.attempt_id, dict(body.transient_env or {})))

    async def refresh(self, scope: Scope, task_id: str) -> wire.TaskDetail:
        """Write the core run's terminal state back."""
        detail = await self.task_detail(task_id, scope=scope)
        refreshed = await self.refresher.refresh(task_id)
        return await self.task_detail(task_id) if refreshed is not None else detail

    async def preview_refresh(self, scope: Scope, task_id: str) -> wire.DryRun:
        """The dry run of a refresh."""
        detail = await self.task_detail(task_id, scope=scope)
        return dry_run(await self.refresher.preview_refresh(task_id, detail))

    async def attempts(self, scope: Scope, task_id: str, cursor: int,
                       limit: int) -> wire.AttemptList:
        """The attempt history of a task, oldest first."""
        detail = await self.task_detail(task_id, scope=scope)
        page = await queries.list_attempts(self.pool, task_id, cursor=cursor, limit=limit)
        judges = await queries.judge_runs(self.pool, task_id,
                                          [row.attempt_id for row in page.rows])
        items = [views.attempt(row, self.settings.timeout_budgets, detail.queue, judges)
                 for row in page.rows]
        return wire.AttemptList(items=items, next_cursor=page.next_cursor,
                                change_seq=page.high_water)

    async def retry(self, scope: Scope, task_id: str, body: wire.RetryBody) -> RetryAnswer:
        """Retry under an idempotency key (counted by outcome). A key already used answers
        its original attempt with ``Idempotent-Replayed: true``."""
        await require_visible(self.pool, scope, "task", task_id)
        with counted(self.metrics.retries) as outcome_of:
            attempt_id, replayed = await self.dispatcher.retry(
                task_id, body.idempotency_key, body.reason)
            attempt = await self._attempt(task_id, attempt_id)
            outcome_of(attempt.state)
            return Response(attempt, status_code=HTTP_200_OK, headers=_replayed(replayed))

    async def preview_retry(self, scope: Scope, task_id: str,
                            body: wire.RetryBody) -> RetryAnswer:
        """The dry run of a retry."""
        await require_visible(self.pool, scope, "task", task_id)
        preview = await self.dispatcher.preview_retry(task_id, body.idempotency_key,
                                                      body.reason)
        return Response(dry_run(preview), status_code=HTTP_200_OK)

    async def _attempt(self, task_id: str, attempt_id: str) -> wire.Attempt:
        row = await queries.get_attempt(self.pool, task_id, attempt_id)
        if row is None:
            raise NotFound(f"attempt {attempt_id} not found", attemptId=attempt_id)
        found = await queries.get_task(self.pool, row.task_id)
        queue = found[0].queue if found else ""
        return views.attempt(row, self.settings.timeout_budgets, queue)

    async def judge(self, scope: Scope, task_id: str, attempt_id: str,
                    body: wire.JudgeBody) -> JudgeAnswer:
        """Record a judge's verdict on an ended attempt (201; the same ``judgeId`` and verdict
        again: the original, 200). It never retries anything."""
        await require_visible(self.pool, scope, "task", task_id)
        verdict = _verdict(attempt_id, body)
        result = await self.queue.judge(RecordJudge(task_id, verdict))
        row = await queries.get_judge_run(self.pool, task_id, verdict.judge_id)
        assert row is not None, "a recorded verdict has its row"
        return Response(views.judge_run(row),
                        status_code=HTTP_201_CREATED if result else HTTP_200_OK,
                        headers=_replayed(not result))

    async def preview_judge(self, scope: Scope, task_id: str, attempt_id: str,
                            body: wire.JudgeBody) -> JudgeAnswer:
        """The dry run of recording a verdict."""
        await require_visible(self.pool, scope, "task", task_id)
        preview = await self.queue.preview_judge(RecordJudge(task_id,
                                                             _verdict(attempt_id, body)))
        return Response(dry_run(preview), status_code=HTTP_200_OK)

    async def create_runner_job(self, scope: Scope, run_id: str,
                                body: wire.RunnerJobBody) -> wire.RunnerJob:
        """Create (or adopt) a reserved run's runner job."""
        await require_visible(self.pool, scope, "run", run_id)
        await self.queue.create_runner_job(run_id, dict(body.transient_env or {}))
        return await self.runner_job(EVERYTHING, run_id)

    async def preview_runner_job(self, scope: Scope, run_id: str,
                                 body: wire.RunnerJobBody) -> wire.DryRun:
        """The dry run of creating a reserved run's runner job: its plan."""
        await require_visible(self.pool, scope, "run", run_id)
        return dry_run(await self.queue.preview_runner_job(run_id,
                                                           dict(body.transient_env or {})))

    async def runner_job(self, scope: Scope, run_id: str) -> wire.RunnerJob:
        """The runner-job view of a run, from its projection."""
        await require_visible(self.pool, scope, "run", run_id)
        row = await queries.get_run(self.pool, run_id)
        if row is None:
            raise NotFound(f"run {run_id} not found", runId=run_id)
        return views.runner_job(row)


class SessionApi:
    """Sessions and the commands of runs, as the session routes answer them."""

    def __init__(self, pool: asyncpg.Pool, settings: RunnerSettings,
                 sessions: SessionService, commands: SessionCommands) -> None:
        self.pool = pool
        self.settings = settings
        self.sessions = sessions
        self.commands = commands

    async def detail(self, session_id: str,
                     reader_id: str = DEFAULT_READER) -> sw.SessionDetail:
        """The session from its projections and line heads, or ``not-found``."""
        row = await session_queries.get_session(self.pool, session_id, reader_id)
        if row is None:
            raise NotFound(f"session {session_id} not found", sessionId=session_id)
        turns = await session_queries.recent_turns(self.pool, session_id)
        output_seq = await session_lines.last_seq(self.pool, session_id, "output")
        trace_seq = await session_lines.last_seq(self.pool, session_id, "trace")
        return views.session_detail(row, turns, output_seq, trace_seq, reader_id)

    def _new_session(self, scope: Scope, body: sw.SessionCreateBody) -> NewSession:
        return NewSession(tenant_id=scope.tenant,
            session_id=body.session_id, conversation_id=body.conversation_id,
            backend_profile=body.backend_profile or self.settings.default_profile,
            run_base=msgspec.to_builtins(body.run_base) if body.run_base else {})

    def preview_create(self, scope: Scope, body: sw.SessionCreateBody) -> SessionAnswer:
        """The dry run of creating a session (200)."""
        plan = self.sessions.preview_create(self._new_session(scope, body))
        return Response(wire.DryRun(mutation=False, plan=plan), status_code=HTTP_200_OK)

    async def create(self, scope: Scope, body: sw.SessionCreateBody) -> SessionAnswer:
        """Create a session and its volume (201), of the caller's tenant (its cap counts
        it)."""
        session_id = await self.sessions.create(self._new_session(scope, body))
        return Response(await self.detail(session_id), status_code=HTTP_201_CREATED)

    async def index(self, scope: Scope, state: SessionFilter, reader_id: str,
                    backend_profile: str | None, cursor: str | None,
                    limit: int) -> sw.SessionList:
        """A page of sessions."""
        page = await session_queries.list_sessions(
            self.pool, state=state, reader_id=reader_id,
            backend_profile=backend_profile, cursor=cursor, limit=limit, scope=scope)
        return sw.SessionList([views.session_item(r) for r in page.rows],
                              page.next_cursor, page.high_water)

    async def show(self, scope: Scope, session_id: str, reader_id: str) -> sw.SessionDetail:
        """One session (a read: it changes nothing)."""
        await require_visible(self.pool, scope, "session", session_id)
        return await self.detail(session_id, reader_id)

    async def lines(self, scope: Scope, session_id: str, channel: str, after_seq: int,
                    limit: int) -> sw.LinePage:
        """Output or trace lines after ``after_seq`` (a read: it changes nothing)."""
        await require_visible(self.pool, scope, "session", session_id)
        session = await session_queries.get_session(self.pool, session_id, DEFAULT_READER)
        if session is None:
            raise NotFound(f"session {session_id} not found", sessionId=session_id)
        lines, last = await session_lines.page(self.pool, session_id, channel, after_seq,
                                               limit)
        return sw.LinePage(
            session_id=session_id, channel=channel,
            items=[sw.LineItem(line.seq, line.runner_job_id, line.line, line.recorded_at,
                               cast(sw.Stream, line.stream), line.part, line.parts)
                   for line in lines],
            next_after_seq=lines[-1].seq if lines else after_seq, last_seq=last,
            running=session.state == SessionStatus.RUNNING)

    async def read(self, scope: Scope, session_id: str, reader_id: str) -> sw.SessionDetail:
        """Advance a reader's cursor."""
        await require_visible(self.pool, scope, "session", session_id)
        await self.sessions.read(session_id, reader_id)
        return await self.detail(session_id, reader_id)

    async def preview_read(self, scope: Scope, session_id: str, reader_id: str) -> wire.DryRun:
        """The dry run of marking a session read."""
        await require_visible(self.pool, scope, "session", session_id)
        return wire.DryRun(mutation=False, plan=await self.sessions.preview(
            "read", MarkSessionRead(session_id, reader_id)))

    async def cancel(self, scope: Scope, session_id: str, reason: str | None) -> sw.SessionDetail:
        """Stop the session's running turn."""
        await require_visible(self.pool, scope, "session", session_id)
        await self.sessions.cancel(session_id, reason)
        return await self.detail(session_id)

    async def preview_cancel(self, scope: Scope, session_id: str,
                             reason: str | None) -> wire.DryRun:
        """The dry run of stopping the session's running turn."""
        await require_visible(self.pool, scope, "session", session_id)
        return wire.DryRun(mutation=False, plan=await self.sessions.preview(
            "cancel", CancelSession(session_id, reason)))

    async def refresh_storage(self, scope: Scope, session_id: str,
                              body: sw.StorageSummaryBody | None) -> sw.SessionDetail:
        """Record a posted volume summary (None: refused, the manager reads no job file)."""
        await require_visible(self.pool, scope, "session", session_id)
        summary = None
        if body is not None:
            summary = msgspec.to_builtins(body)
            if body.storage_updated_at is not None:
                summary["storageUpdatedAt"] = body.storage_updated_at.isoformat()
        await self.sessions.refresh_storage(session_id, summary)
        return await self.detail(session_id)

    async def add_command(self, scope: Scope, run_id: str,
                          body: sw.CommandBody) -> CommandAnswer:
        """Add a command (a turn) to a run: 201 when it started one, 200 when found."""
        await require_visible(self.pool, scope, "run", run_id)
        result = await self.commands.add_command(_new_command(run_id, body))
        answer = sw.CommandResult(
            session_id=result["sessionId"], run_id=result["runId"],
            command_id=result["commandId"], runner_job_id=result["runnerJobId"],
            thread_id=result["threadId"], resumed=result["resumed"], created=result["created"],
            session_path=views.session_path(result["sessionId"]))
        return Response(answer, status_code=HTTP_201_CREATED if answer.created else HTTP_200_OK)

    async def preview_command(self, scope: Scope, run_id: str,
                              body: sw.CommandBody) -> CommandAnswer:
        """The dry run of adding a command: the turn and its job's plan (200)."""
        await require_visible(self.pool, scope, "run", run_id)
        plan = await self.commands.preview_command(_new_command(run_id, body))
        return Response(wire.DryRun(mutation=False, plan=plan), status_code=HTTP_200_OK)


def _new_command(run_id: str, body: sw.CommandBody) -> NewCommand:
    """The session layer's command of a posted one (``commandId`` must start ``cmd_``)."""
    if body.command_id is not None and not body.command_id.startswith("cmd_"):
        raise InvalidRequest("commandId must start with cmd_", field="commandId")
    return NewCommand(run_id=run_id, prompt=body.payload.prompt,
                      thread_id=body.payload.thread_id, command_id=body.command_id,
                      transient_env=dict(body.transient_env or {}))


def _verdict(attempt_id: str, body: wire.JudgeBody) -> JudgeVerdict:
    """The verdict a judge body records (a new ``judgeId`` unless it names one)."""
    return JudgeVerdict(
        judge_id=body.judge_id or new_id("jdg"), attempt_id=attempt_id, judge=body.judge,
        request=body.request, result=body.result, failure_kind=body.failure_kind,
        retry_suggested=body.retry_suggested, retry_reason=body.retry_reason,
        summary=body.summary)
