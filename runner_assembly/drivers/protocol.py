"""The runner driver interface: create (idempotent by name), status, cancel."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, cast

import msgspec

from ledger.events import TokenUsage
from ledger.states import FailureKind, JobState
from runner_assembly.contract.jobfile import JobFile

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """What a driver creates a job from: the job file (no secret value) and what is
    delivered beside it, never in it."""

    job: JobFile
    """The runner's job file, written as it is (the local driver adds its own paths)."""
    secret_root: str
    """Where a local runner finds referenced secrets: an argument of the runner, not in the
    job file."""
    job_secret: dict[str, str] = field(default_factory=dict, repr=False)
    """Values of the per-job secret: the driver stores them as a secret, nowhere else."""
    runner_token: str = field(default="", repr=False)
    """The job's runner-protocol bearer token: delivered with the per-job secret only."""

    @property
    def runner_job_id(self) -> str:
        """The job's reserved id (its name derives from it)."""
        return self.job.runner_job_id

    def public(self) -> dict[str, object]:
        """The job file as builtins: what a job may show (no secret value)."""
        return cast(dict[str, object], msgspec.to_builtins(self.job))


@dataclass(frozen=True)
class JobHandle:
    """What the driver knows of a created job."""

    driver: str
    name: str
    handle: str
    adopted: bool


@dataclass(frozen=True)
class JobStatus:
    """The runner job's state; terminal states carry the outcome."""

    state: JobState
    exit_code: int | None = None
    failure_kind: str | None = None
    failure_message: str | None = None
    assembly: dict[str, object] | None = None
    thread_id: str | None = None
    """The thread the backend started or resumed, as the runner reported it."""
    startup: dict[str, object] | None = None
    """The runner's startup event (its work-ready capability summary), once it wrote one."""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    """When the backend (or, when none ran, the job) started and ended, as the job reported
    it: the attempt's real duration, whenever it is refreshed."""
    usage: TokenUsage | None = None
    """The token usage the backend reported (docs/backends.md), if any."""
    alive_at: datetime | None = None
    """A sign of life the driver itself sees, for a job whose runner cannot beat yet: now
    while one of its containers is being started (a pod waiting for its image, before or
    between its init and main containers), else when its running container started."""

    @property
    def terminal(self) -> bool:
        """True once the job has finished one way or another."""
        return self.state != JobState.RUNNING


class DriverError(Exception):
    """The driver could not do what was asked; ``kind`` is a SPEC 7 failure kind."""

    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class RunnerDriver(Protocol):
    """A place where runner jobs run: local processes, or Kubernetes Jobs."""

    name: str

    async def create(self, spec: JobSpec) -> JobHandle:
        """Create the job named ``spec.runner_job_id``, or adopt it if it already exists."""
        ...

    async def status(self, runner_job_id: str) -> JobStatus:
        """The job's current state."""
        ...

    async def statuses(self, runner_job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """:meth:`status` of each job, as cheaply as the driver can (the session loop asks
        it of every quiet job each round)."""
        ...

    async def cancel(self, runner_job_id: str) -> None:
        """Stop the job (no error if it has already ended)."""
        ...

    async def ensure_volume(self, volume: dict[str, object]) -> str:
        """Resolve or create a session volume (a plan's ``sessionVolume``); its phase."""
        ...

    async def delete_volume(self, volume: dict[str, object]) -> None:
        """Remove a session volume (no error if it is gone)."""
        ...


STATUSES_BETWEEN_YIELDS = 32
"""Local statuses asked in a row before the event loop may serve a request (a local status
is ~75 µs of file and process calls: 200 jobs would hold it 15 ms)."""


class StatusEach:
    """:meth:`RunnerDriver.statuses` as one :meth:`RunnerDriver.status` a job: for a driver
    whose status costs no remote call."""

    async def statuses(self: RunnerDriver, runner_job_ids: Sequence[str]
                       ) -> dict[str, JobStatus]:
        """Each job's :meth:`RunnerDriver.status`, one after the other, letting the event
        loop run every :data:`STATUSES_BETWEEN_YIELDS` jobs; a job whose status raised is
        left out (unknown: asked again next time)."""
        seen = {}
        for index, job in enumerate(runner_job_ids, 1):
            try:
                seen[job] = await self.status(job)
            except Exception:  # one job's failure must not hide the others': unknown
                log.exception("the status of runner job %s could not be read", job)
            if index % STATUSES_BETWEEN_YIELDS == 0:
                await asyncio.sleep(0)
        return seen
