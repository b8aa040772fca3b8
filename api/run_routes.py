"""The runner-job API of the core layer.

``GET  /api/v1/runs/{runId}/runner-job``: the run's runner job -- value-free plan, status,
failure and the runner's bounded assembly event.
``POST /api/v1/runs/{runId}/runner-job``: create the runner job of a reserved run, with an
optional ``transientEnv``; ``dryRun`` returns the rendered plan and changes nothing. A run
whose job already exists answers that job (creation is idempotent).
"""

from __future__ import annotations

from litestar import Controller, get

from api import examples, wire
from api.access import role
from api.body import read_body
from api.errors import READ_ERRORS, WRITE_ERRORS
from api.openapi import command
from api.params import Caller, DryRunFlag, HttpRequest, QueueDep, RunId
from runner_assembly.assembly import model


class RunnerJobController(Controller):
    """The runner job of one run."""

    path = "/api/v1/runs/{run_id:str}/runner-job"
    tags = ("runs",)

    @get("/", responses=READ_ERRORS)
    async def show_runner_job(self, queue_api: QueueDep, caller: Caller,
                              run_id: RunId) -> wire.RunnerJob:
        """The run's runner job: plan (names, keys, paths, hashes), status, assembly event."""
        return await queue_api.runner_job(caller, run_id)

    @command("/", wire.RunnerJobBody, examples.RUNNER_JOB, WRITE_ERRORS, required=False,
             access=role("operator"))
    async def create_runner_job(self, request: HttpRequest, queue_api: QueueDep, caller: Caller,
                     run_id: RunId,
                     dry_run: DryRunFlag = False) -> wire.RunnerJob | wire.DryRun:
        """Create (or adopt) the runner job of a reserved run; ``dryRun`` shows its plan."""
        body = await read_body(request, wire.RunnerJobBody, empty_ok=True, gate=model.gate)
        dry = dry_run or body.dry_run
        answer = queue_api.preview_runner_job if dry else queue_api.create_runner_job
        return await answer(caller, run_id, body)
