"""The runner-job API of the core layer.

``GET  /api/v1/runs/{runId}/runner-job``: the run's runner job -- value-free plan, status,
failure and the runner's bounded assembly event.
``POST /api/v1/runs/{runId}/runner-job``: create the runner job of a reserved run, with an
optional ``transientEnv``; ``dryRun`` returns the rendered plan and changes nothing. A run
whose job already exists answers that job (creation is idempotent).
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Controller, Request, get, post
from litestar.datastructures import State
from litestar.params import PathParameter
from litestar.status_codes import HTTP_200_OK

from api import views, wire
from api.body import read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from api.queue_routes import DryRunFlag
from ledger.errors import NotFound
from ledger.states import AttemptStatus
from projections import queries
from runner_assembly.orchestration.dispatch import Dispatcher

RunId = Annotated[str, PathParameter(min_length=1, max_length=128,
                                     pattern=wire.IDENTIFIER_PATTERN)]


class RunnerJobController(Controller):
    """The runner job of one run."""

    path = "/api/v1/runs/{run_id:str}/runner-job"
    tags = ("runs",)

    @get("/", responses=READ_ERRORS)
    async def show(self, state: State, run_id: RunId) -> wire.RunnerJob:
        """The run's runner job: plan (names, keys, paths, hashes), status, assembly event."""
        return await runner_job(state, run_id)

    @post("/", status_code=HTTP_200_OK, responses=WRITE_ERRORS)
    async def create(self, request: Request[Any, Any, Any], state: State, run_id: RunId,
                     dry_run: DryRunFlag = False) -> wire.RunnerJob | wire.DryRun:
        """Create (or adopt) the runner job of a reserved run; ``dryRun`` shows its plan."""
        body = await read_body(request, wire.RunnerJobBody, empty_ok=True)
        reserved = await queries.get_reserved_run(state.pool, run_id)
        if reserved is None:
            raise NotFound(f"run {run_id} not found", runId=run_id)
        dispatcher: Dispatcher = state.dispatcher
        facts = await dispatcher.facts(reserved.task_id)
        env = dict(body.transient_env or {})
        dispatcher.check_env(facts, env)
        if dry_run or body.dry_run:
            job = await dispatcher.plan_for(facts, [], reserved.attempt_id, env)
            return views.plan("runner-job", reserved.task_id, None, None, [], runId=run_id,
                              attemptState=reserved.state, **job)
        if reserved.state == AttemptStatus.RESERVED:
            await dispatcher.materialize(facts.task_id, reserved.attempt_id, facts, env)
        return await runner_job(state, run_id)


async def runner_job(state: State, run_id: str) -> wire.RunnerJob:
    """The runner-job view of a run, from its projection."""
    row = await queries.get_run(state.pool, run_id)
    if row is None:
        raise NotFound(f"run {run_id} not found", runId=run_id)
    return views.runner_job(row)
