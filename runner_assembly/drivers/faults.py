"""Seeded fault injection for crash-recovery tests (``SVC_FAULTS``), off by default.

``create-timeout``: a create that really creates the job then reports a timeout, so the
caller never learns it worked. ``create-timeout@P`` does so with probability P, drawn from
``SVC_FAULT_SEED``. Crash points, where the server kills itself (SIGKILL):
``crash-after-reserve`` (an attempt is reserved, its job not created yet),
``crash-after-spawn`` (the local runner process started, its ``pid`` not written yet) and
``crash-after-create`` (the driver created the job, the ledger does not record it yet);
dispatch, retry and a session turn (``POST /runs/{id}/commands``) all pass them. Runner
crash points, where a runner kills itself: ``runner-crash-before-claim``,
``runner-crash-after-claim`` (its backend not started yet), ``runner-crash-mid-lines`` (an
output batch sent, its acknowledgement not recorded) and ``runner-crash-before-exit`` (every
line sent, the exit not). The local driver hands them to the first job of each task (or
session) it creates in ``spec.json``; the runner gets no other way in.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from ledger.states import FailureKind
from runner_assembly.drivers.protocol import (
    DriverError,
    JobHandle,
    JobSpec,
    JobStatus,
    RunnerDriver,
)
from runner_assembly.runner.crash import crash_at as crash_at  # the runner needs it light


def _probability(faults: frozenset[str], name: str) -> float:
    for fault in faults:
        base, _, chance = fault.partition("@")
        if base == name:
            return float(chance) if chance else 1.0
    return 0.0


class FaultyDriver:
    """Wraps a driver; fresh creates succeed but may report a timeout."""

    def __init__(self, inner: RunnerDriver, faults: frozenset[str], seed: int) -> None:
        self.inner = inner
        self.name = inner.name
        self._timeout_chance = _probability(faults, "create-timeout")
        self._random = random.Random(seed)

    async def create(self, spec: JobSpec) -> JobHandle:
        """Create for real; then, for a fresh job, maybe pretend it timed out."""
        handle = await self.inner.create(spec)
        if not handle.adopted and self._random.random() < self._timeout_chance:
            raise DriverError(FailureKind.INFRA_FAILED, "runner job creation timed out")
        return handle

    async def status(self, runner_job_id: str) -> JobStatus:
        """As the wrapped driver."""
        return await self.inner.status(runner_job_id)

    async def statuses(self, runner_job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """As the wrapped driver."""
        return await self.inner.statuses(runner_job_ids)

    async def cancel(self, runner_job_id: str) -> None:
        """As the wrapped driver."""
        await self.inner.cancel(runner_job_id)

    async def ensure_volume(self, volume: dict[str, object]) -> str:
        """As the wrapped driver."""
        return await self.inner.ensure_volume(volume)

    async def delete_volume(self, volume: dict[str, object]) -> None:
        """As the wrapped driver."""
        await self.inner.delete_volume(volume)


RUNNER_POINTS = frozenset({"runner-crash-before-claim", "runner-crash-after-claim",
                           "runner-crash-mid-lines", "runner-crash-before-exit"})


def runner_faults(faults: frozenset[str]) -> list[str]:
    """The runner crash points among ``faults``, for a job's ``spec.json``."""
    return sorted(faults & RUNNER_POINTS)


def crash_after_reserve(faults: frozenset[str]) -> None:
    """Die like a killed server if the fault is on."""
    crash_at(faults, "crash-after-reserve")


def wrap(driver: RunnerDriver, faults: frozenset[str], seed: int = 0) -> RunnerDriver:
    """The driver, wrapped when a driver fault is configured (its draws seeded with
    ``seed``: ``SVC_FAULT_SEED``)."""
    if _probability(faults, "create-timeout") > 0:
        return FaultyDriver(driver, faults, seed)
    return driver
