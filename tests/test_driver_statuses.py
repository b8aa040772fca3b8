"""The local driver's statuses of many jobs: each job's own status, asked in a row without
holding the event loop for the whole fleet."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ledger.states import JobState
from runner_assembly.drivers.local import LocalDriver
from runner_assembly.drivers.protocol import STATUSES_BETWEEN_YIELDS, JobStatus

JOBS = 100


async def test_local_statuses_match_each_status_and_let_the_loop_run(tmp_path: Path) -> None:
    driver = LocalDriver(tmp_path / "jobs", tmp_path / "sessions", sandbox="off")
    running = [f"job_live{n:03d}" for n in range(JOBS)]
    for job in running:
        folder = driver.job_dir(job)
        folder.mkdir(parents=True)
        (folder / "pid").write_text(str(os.getpid()))  # a process that runs: this one
    jobs = [*running, "job_neverseen"]
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    before = ticks
    seen = await driver.statuses(jobs)
    during = ticks - before
    ticker.cancel()
    assert seen == {job: await driver.status(job) for job in jobs}
    assert {seen[job].state for job in running} == {"running"}
    assert seen["job_neverseen"].failure_kind == "runner-lost"
    assert during >= len(jobs) // STATUSES_BETWEEN_YIELDS  # the loop ran between the rows
    assert await driver.statuses([]) == {}


class OneBroken(LocalDriver):
    """Every job runs but one, whose status cannot be read."""

    async def status(self, runner_job_id: str) -> JobStatus:
        if runner_job_id == "job_broken":
            raise OSError("its folder cannot be read")
        return JobStatus(JobState.RUNNING)


async def test_a_status_that_raises_leaves_only_its_job_unknown(tmp_path: Path) -> None:
    driver = OneBroken(tmp_path / "jobs", tmp_path / "sessions", sandbox="off")
    seen = await driver.statuses(["job_a", "job_broken", "job_b"])
    assert seen == {"job_a": JobStatus(JobState.RUNNING), "job_b": JobStatus(JobState.RUNNING)}
