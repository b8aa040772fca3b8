"""Refreshes side by side agree on how a job ended, even when one of them removes the job."""

from __future__ import annotations

from pathlib import Path

from ledger.intake import submit_command
from ledger.states import FailureKind, JobState
from runner_assembly.drivers.protocol import JobStatus
from tests.support import orchestration_on, replay_report, task_body
from tests.test_attempt_property import ScriptedDriver


class UnconfigurableDriver(ScriptedDriver):
    """Every job waits on a secret that does not exist (kubelet's CreateContainerConfigError)
    until it is cancelled; a cancelled job is gone, as a deleted Job is (HTTP 404)."""

    async def status(self, runner_job_id: str) -> JobStatus:
        if self.jobs.get(runner_job_id) == "running":
            return JobStatus(JobState.BLOCKED, failure_kind=FailureKind.SECRET_UNAVAILABLE,
                             failure_message="a referenced secret or key is missing")
        return JobStatus(JobState.FAILED, failure_kind=FailureKind.INFRA_FAILED,
                         failure_message="the runner job vanished")


async def test_a_refresh_after_another_stopped_an_unconfigurable_job_still_sees_it_blocked(
    database_url: str, tmp_path: Path
) -> None:
    driver = UnconfigurableDriver()
    async with orchestration_on(database_url, tmp_path, driver) as (services, writer):
        submit = submit_command(task_body(), actor="test")
        await writer.execute(submit, "test")
        await services.dispatcher.dispatch(submit.task_id)
        task = await services.reader.state(submit.task_id)
        assert task is not None and task.latest is not None and task.latest.ids is not None
        job = task.latest.ids.runner_job_id

        # The first refresh reads the driver's outcome and stops the job; a second one
        # that read the attempt as running before the first wrote it back asks next.
        first = await services.protocol.status(job)
        assert driver.jobs[job] == "cancelled", "kubelet would retry the job forever"
        second = await services.protocol.status(job)
        assert (first.state, first.failure_kind) == ("blocked", "secret-unavailable")
        assert (second.state, second.failure_kind) == ("blocked", "secret-unavailable")

        await services.refresher.refresh(submit.task_id)
        ended = await services.reader.state(submit.task_id)
        assert ended is not None and ended.latest is not None
        assert (ended.state, ended.latest.failure_kind) == ("blocked", "secret-unavailable")
        assert (await replay_report(database_url)).ok
