"""Refresh: write a running attempt's terminal state back from what its runner reported
(or from a lost lease), or preview it."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from ledger.events import AttemptEnd, RunEnd
from ledger.run import FinishRun, RecordAssembly, RecordRunnerStartup
from ledger.states import AttemptStatus, attempt_outcome, run_status_of
from ledger.task import AttemptIds, FinishAttempt
from ledger.writer import Outcome, Writer
from runner_assembly.assembly.capability import startup_record
from runner_assembly.drivers.protocol import JobStatus
from runner_assembly.orchestration.attempt_jobs import ACTOR
from runner_assembly.orchestration.facts import TaskReader, bounded
from runner_assembly.orchestration.preview import Preview
from runner_assembly.orchestration.runner_protocol import RunnerProtocol
from runner_assembly.orchestration.session_turns import SessionTurns


def finish_command(task_id: str, row: AttemptIds, status: JobStatus) -> FinishAttempt:
    """The command that ends the attempt as its ended job says."""
    ended, implied = attempt_outcome(status.state)
    kind = status.failure_kind or implied
    message = bounded(status.failure_message) if status.failure_message else None
    return FinishAttempt(task_id, AttemptEnd(
        row.attempt_id, ended, kind, message, status.exit_code,
        started_at=status.started_at.isoformat() if status.started_at else msgspec.UNSET,
        finished_at=status.finished_at.isoformat() if status.finished_at else msgspec.UNSET,
        usage=status.usage or msgspec.UNSET))


@dataclass(eq=False)
class Refresher:
    """Writes the core terminal state of a task's latest attempt back."""

    writer: Writer
    reader: TaskReader
    protocol: RunnerProtocol
    turns: SessionTurns

    async def _ended(self, task_id: str, *, stop_lost: bool
                     ) -> tuple[AttemptIds, JobStatus] | None:
        """The running latest attempt's ids and its job's terminal status (None: nothing
        to write back)."""
        task = await self.reader.state(task_id)
        latest = task.latest if task is not None else None
        if latest is None or latest.ids is None or latest.state != AttemptStatus.RUNNING:
            return None
        status = await self.protocol.status(latest.ids.runner_job_id, stop_lost=stop_lost)
        return (latest.ids, status) if status.terminal else None

    async def refresh(self, task_id: str) -> Outcome | None:
        """Record the ended job's run, turn and attempt; None when there is nothing to do."""
        ended = await self._ended(task_id, stop_lost=True)
        if ended is None:
            return None
        row, status = ended
        finish = finish_command(task_id, row, status)
        await self.record_runner_events(row.run_id, status)
        await self.turns.finish(row.session_id, row.runner_job_id, status)
        await self.writer.execute(FinishRun(row.run_id, RunEnd(
            run_status_of(status.state), status.exit_code, finish.end.failure_kind,
            finish.end.failure_message)), ACTOR)
        outcome = await self.writer.execute(finish, ACTOR)
        await self.protocol.end(row.runner_job_id, str(status.state))
        return outcome

    async def preview_refresh(self, task_id: str, current: object) -> Preview:
        """What :meth:`refresh` would record of the attempt (a lost lease is not stopped);
        ``current`` is the task as it stands, shown when there is nothing to do."""
        ended = await self._ended(task_id, stop_lost=False)
        if ended is None:
            return Preview("refresh", task_id, current, current, [])
        return Preview.of("refresh", task_id,
                          await self.writer.plan(finish_command(task_id, *ended)))

    async def record_runner_events(self, run_id: str, status: JobStatus) -> None:
        """Record what the runner reported: its startup event (bounded to the SPEC 2.11
        fields), then its assembly event. Each is recorded once."""
        startup = startup_record(status.startup)
        if startup is not None:
            await self.writer.execute(RecordRunnerStartup(run_id, startup), ACTOR)
        if status.assembly is not None:
            await self.writer.execute(RecordAssembly(run_id, status.assembly), ACTOR)
