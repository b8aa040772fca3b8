"""Routes that create and track attempts: dispatch, refresh, attempt history, retry."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.datastructures import State
from litestar.params import QueryParameter
from litestar.status_codes import HTTP_200_OK
from prometheus_client import Counter

from api import views, wire
from api.body import read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from api.queue_routes import DryRunFlag, Limit, TaskId, task_detail
from ledger.errors import DomainError, NotFound
from ledger.intake import payload_hash
from projections import queries
from runner_assembly.assembly.capability import work_ready_summary
from runner_assembly.orchestration.dispatch import Dispatcher


class AttemptController(Controller):
    """Dispatch, refresh, attempts and retry of one task."""

    path = "/api/v1/queue/tasks/{task_id:str}"
    tags = ("queue",)

    @post("/dispatch", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def dispatch(self, request: Request[Any, Any, Any], state: State, task_id: TaskId,
                       dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Reserve the attempt, then create its run, command and runner job."""
        body = await read_body(request, wire.DispatchBody, empty_ok=True)
        dispatcher: Dispatcher = state.dispatcher
        dry_run = dry_run or body.dry_run
        env = dict(body.transient_env or {})
        with counted(state.metrics.dispatches, dry_run) as outcome_of:
            outcome, _ = await dispatcher.dispatch(task_id, body.attempt_id, dry_run, env)
            if dry_run:
                latest = outcome.state.latest
                job = await dispatcher.plan_for(
                    await dispatcher.facts(task_id), outcome.events,
                    body.attempt_id or (latest.attempt_id if latest else None), env)
                return views.plan("dispatch", task_id, outcome.before, outcome.state,
                                  outcome.events, workReady=work_ready_summary(), **job)
            detail = await task_detail(state, task_id, work_ready_summary())
            outcome_of(detail.latest_attempt["state"] if detail.latest_attempt else "none")
            return detail

    @post("/refresh", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def refresh(self, state: State, task_id: TaskId,
                      dry_run: DryRunFlag = False) -> wire.TaskDetail | wire.DryRun:
        """Write the core run's terminal state back to the task; no-op while it runs."""
        detail = await task_detail(state, task_id)
        outcome = await state.dispatcher.refresh(task_id, dry_run)
        if dry_run:
            if outcome is None:
                return views.plan("refresh", task_id, detail, detail, [])
            return views.plan("refresh", task_id, outcome.before, outcome.state,
                              outcome.events)
        return await task_detail(state, task_id) if outcome is not None else detail

    @get("/attempts", responses=READ_ERRORS)
    async def attempts(
        self, state: State, task_id: TaskId,
        cursor: Annotated[int, QueryParameter(ge=0, le=1_000_000)] = 0, limit: Limit = 50,
    ) -> wire.AttemptList:
        """The formal attempt history, oldest first; ``cursor`` is a retry index."""
        detail = await task_detail(state, task_id)
        page = await queries.list_attempts(state.pool, task_id, cursor=cursor, limit=limit)
        items = [views.attempt(row, state.settings.timeout_budgets, detail.queue)
                 for row in page.rows]
        return wire.AttemptList(items=items, next_cursor=page.next_cursor,
                                change_seq=page.high_water)

    @post("/retry", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def retry(self, request: Request[Any, Any, Any], state: State, task_id: TaskId,
                    dry_run: DryRunFlag = False) -> wire.Attempt | wire.DryRun:
        """Retry a failed or blocked task under an idempotency key (SPEC 4.3 rule 6)."""
        body = await read_body(request, wire.RetryBody)
        dispatcher: Dispatcher = state.dispatcher
        if dry_run or body.dry_run:
            return await self._plan_retry(state, task_id, body)
        with counted(state.metrics.retries, False) as outcome_of:
            _, attempt_id = await dispatcher.retry(task_id, body.idempotency_key, body.reason,
                                                   False)
            assert attempt_id is not None
            attempt = await _attempt(state, attempt_id)
            outcome_of(attempt.state)
            return attempt

    async def _plan_retry(self, state: State, task_id: str,
                          body: wire.RetryBody) -> wire.DryRun:
        dispatcher: Dispatcher = state.dispatcher
        outcome, _ = await dispatcher.retry(task_id, body.idempotency_key, body.reason, True)
        found = await queries.get_task(state.pool, task_id)
        assert found is not None
        row, contract = found
        facts = await dispatcher.facts(task_id)
        replayed = next((a for a in outcome.before.attempts
                         if a.idempotency_key == body.idempotency_key), None)
        job = await dispatcher.plan_for(facts, outcome.events,
                                        replayed.attempt_id if replayed else None, {})
        return views.plan(
            "retry", task_id, outcome.before, outcome.state, outcome.events,
            payloadHashVerified=payload_hash(contract) == row.payload_hash,
            replayOf=replayed.attempt_id if replayed else None,
            missingSecretKeys=dispatcher.check_dependencies(facts),
            **job)


@contextmanager
def counted(counter: Counter, dry_run: bool) -> Iterator[Callable[[str], None]]:
    """Count one call by outcome: the attempt state it left, or the error code it raised."""
    def outcome_of(label: str) -> None:
        if not dry_run:
            counter.labels(label).inc()

    try:
        yield outcome_of
    except DomainError as error:
        outcome_of(error.code)
        raise


async def _attempt(state: State, attempt_id: str) -> wire.Attempt:
    row = await queries.get_attempt(state.pool, attempt_id)
    if row is None:
        raise NotFound(f"attempt {attempt_id} not found", attemptId=attempt_id)
    found = await queries.get_task(state.pool, row.task_id)
    queue = found[0].queue if found else ""
    return views.attempt(row, state.settings.timeout_budgets, queue)
