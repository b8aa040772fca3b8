"""A session turn is reserved before its runner job exists; a crash between them resumes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.intake import submit_command
from runner_assembly.drivers.protocol import JobHandle, JobSpec
from tests.support import orchestration_on, replay_report, task_body
from tests.test_attempt_property import ScriptedDriver


class Crash(Exception):
    """The manager dies here (nothing catches it)."""


class CrashingDriver(ScriptedDriver):
    """The first create dies before the job exists."""

    crash_next = True

    async def create(self, spec: JobSpec) -> JobHandle:
        if self.crash_next:
            self.crash_next = False
            raise Crash
        return await super().create(spec)


async def test_a_crash_between_turn_reservation_and_job_creation_resumes_the_turn(
    database_url: str, tmp_path: Path
) -> None:
    driver = CrashingDriver()
    async with orchestration_on(database_url, tmp_path, driver) as (services, writer):
        dispatcher = services.dispatcher
        body = task_body(sessionRef={"sessionId": "ses_crash", "conversationId": "cnv_c"})
        submit = submit_command(body, actor="test")
        await writer.execute(submit, "test")
        with pytest.raises(Crash):
            await dispatcher.dispatch(submit.task_id)
        session = await services.turns.state("ses_crash")
        assert session is not None and list(session.turns.values()) == ["reserved"]
        assert not driver.creations, "the turn was reserved before any job existed"

        attempt_id = await dispatcher.dispatch(submit.task_id)
        task = await services.reader.state(submit.task_id)
        assert task is not None and task.latest is not None
        assert (task.state, task.latest.attempt_id) == ("running", attempt_id)
        assert task.latest.ids is not None
        job = task.latest.ids.runner_job_id
        session = await services.turns.state("ses_crash")
        assert session is not None and session.turns == {job: "running"}
        assert dict(driver.creations) == {job: 1}
        assert (await replay_report(database_url)).ok
