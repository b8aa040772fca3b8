"""Stateful property test of dispatch, runner outcomes, refresh, retry and cancel.

The ledger, projections and dispatcher are the real ones on real Postgres. Runner jobs come
from ``ScriptedDriver``, a driver whose jobs finish when a rule says so (the local driver's
processes are exercised by the other tests). It also injects "created, then timed out".
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    initialize,
    invariant,
    precondition,
    rule,
)

from ledger.database import create_pool
from ledger.errors import DomainError, IdempotencyConflict, InvalidTransition, TaskNotRetryable
from ledger.events import JudgeVerdict
from ledger.intake import submit_command
from ledger.states import JobState
from ledger.task import CancelTask, RecordJudge
from runner_assembly.drivers.protocol import (
    DriverError,
    JobHandle,
    JobSpec,
    JobStatus,
    StatusEach,
)
from runner_assembly.orchestration.wiring import orchestration
from runner_assembly.settings import RunnerSettings
from tests.support import WriterMachine, snapshot, write_profile_secret

BLOCKED, COMPLETED, FAILED, RUNNING = (JobState.BLOCKED, JobState.COMPLETED, JobState.FAILED,
                                       JobState.RUNNING)
KEYS = st.sampled_from(["k1", "k2", "k3"])
REASONS = st.sampled_from(["flaky", "fixed input"])
OUTCOMES = st.sampled_from([COMPLETED, FAILED, BLOCKED])
SHARED_ATTEMPT_ID = "att_shared"


class ScriptedDriver(StatusEach):
    """Jobs live in memory; a rule decides how each one ends."""

    name = "scripted"

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self.creations: Counter[str] = Counter()
        self.timeout_next = False

    async def create(self, spec: JobSpec) -> JobHandle:
        adopted = spec.runner_job_id in self.jobs
        if not adopted:
            self.jobs[spec.runner_job_id] = RUNNING
            self.creations[spec.runner_job_id] += 1
            if self.timeout_next:
                self.timeout_next = False
                raise DriverError("infra-failed", "runner job creation timed out")
        return JobHandle(self.name, spec.runner_job_id, f"mem:{spec.runner_job_id}", adopted)

    async def status(self, runner_job_id: str) -> JobStatus:
        state = self.jobs.get(runner_job_id, FAILED)
        kind = "required-skill-unavailable" if state == BLOCKED else None
        return JobStatus(state, exit_code={COMPLETED: 0, FAILED: 1}.get(state),
                         failure_kind=kind)

    async def cancel(self, runner_job_id: str) -> None:
        self.jobs[runner_job_id] = "cancelled"

    async def ensure_volume(self, volume: dict[str, Any]) -> str:
        return "Bound"

    async def delete_volume(self, volume: dict[str, Any]) -> None:
        return None

    async def read_channel(self, runner_job_id: str, channel: str,
                           offset: int) -> tuple[bytes, bool]:
        return b"", self.jobs.get(runner_job_id) != RUNNING

    async def storage_summary(self, runner_job_id: str) -> dict[str, Any] | None:
        return None


class AttemptMachine(WriterMachine):
    """Commands in any order; the model says what each must do."""

    data_dir = Path()
    tasks = Bundle("tasks")

    @initialize()
    def start(self) -> None:
        self.open_ledger(max_size=4)
        self.fence_pool = self.run(create_pool(self.database_url, min_size=1, max_size=4))
        self.driver = ScriptedDriver()
        self.services = orchestration(self.pool, self.fence_pool, self.writer, self.driver,
                                      RunnerSettings(data_dir=self.data_dir))
        self.dispatcher = self.services.dispatcher

    def other_pools(self) -> list[asyncpg.Pool]:
        return [self.fence_pool]

    def attempt(self, task: dict[str, Any], attempt_id: str) -> dict[str, Any]:
        return next(a for a in task["attempts"] if a["id"] == attempt_id)

    def _materialized(self, task: dict[str, Any], attempt_id: str, timeout: bool) -> None:
        """Model: a fresh job may be "created, then timed out"; an existing one is adopted."""
        attempt = self.attempt(task, attempt_id)
        fresh = not attempt.get("created")
        attempt["created"] = True
        if fresh and timeout:
            attempt["failure"] = "infra-failed"
            return
        attempt["state"], attempt["failure"] = RUNNING, None
        task["state"] = RUNNING

    @rule(target=tasks)
    def submit(self) -> str:
        body = {"tenantId": "t", "projectId": "p", "queue": "q", "title": "x",
                "payload": {"prompt": "p"}}
        command = submit_command(body, actor="test")
        self.run(self.writer.execute(command, "test"))
        self.model[command.task_id] = {"state": "pending", "attempts": [], "keys": {},
                                       "judges": []}
        return command.task_id

    @rule()
    def next_create_times_out(self) -> None:
        self.driver.timeout_next = True

    @rule(task_id=tasks, named=st.booleans(), shared=st.booleans())
    def dispatch(self, task_id: str, named: bool, shared: bool = False) -> None:
        """Dispatch, letting the dispatcher choose the attempt id or naming one; a shared
        name is the same for every task (attempt identity is the pair with the task)."""
        task = self.model[task_id]
        own = f"att_{task_id[-8:]}_{len(task['attempts'])}"
        name = (SHARED_ATTEMPT_ID if shared else own) if named else None
        latest = task["attempts"][-1] if task["attempts"] else None
        timeout = self.driver.timeout_next
        if name is not None and any(a["id"] == name for a in task["attempts"]):
            attempt_id = self.run(self.dispatcher.dispatch(task_id, name))
            assert attempt_id == name, "the same attemptId again is the original attempt"
            if self.attempt(task, name)["state"] == "reserved":
                self._materialized(task, name, timeout)
            return
        try:
            attempt_id = self.run(self.dispatcher.dispatch(task_id, name))
        except InvalidTransition:
            resumable = task["state"] == "pending" and latest and latest["state"] == "reserved"
            assert task["state"] != "pending" or (resumable and named)
            return
        assert task["state"] == "pending"
        if latest is not None and latest["state"] == "reserved":
            assert attempt_id == latest["id"], "dispatch resumes the reserved attempt"
        else:
            task["attempts"].append({"id": attempt_id, "state": "reserved", "failure": None,
                                     "key": None, "reason": None})
        self._materialized(task, attempt_id, timeout)

    def _running(self) -> list[str]:
        return [task_id for task_id, task in self.model.items() if task["state"] == RUNNING]

    @precondition(lambda self: bool(self._running()))
    @rule(data=st.data(), outcome=OUTCOMES)
    def runner_finishes(self, data: st.DataObject, outcome: str) -> None:
        self._finish(data.draw(st.sampled_from(self._running())), outcome)

    def _finish(self, task_id: str, outcome: str) -> None:
        running = [a for a in self.model[task_id]["attempts"] if a["state"] == RUNNING]
        if running:
            row = self.run(self.pool.fetchrow(
                "SELECT runner_job_id FROM attempt_summary WHERE task_id = $1"
                " AND attempt_id = $2", task_id, running[-1]["id"]))
            self.driver.jobs[row["runner_job_id"]] = outcome
            running[-1]["finished_as"] = outcome

    @rule(task_id=tasks, outcome=OUTCOMES)
    def run_to_outcome(self, task_id: str, outcome: str) -> None:
        """Dispatch if pending, let the runner end with ``outcome``, refresh: one story."""
        if self.model[task_id]["state"] == "pending":
            self.dispatch(task_id, False)
        if self.model[task_id]["state"] == RUNNING:
            self._finish(task_id, outcome)
            self.refresh(task_id)

    @precondition(lambda self: bool(getattr(self, "model", None)))
    @rule(data=st.data())
    def refresh_finished(self, data: st.DataObject) -> None:
        """Refresh a task whose runner has finished, when there is one."""
        finished = [task_id for task_id, task in self.model.items()
                    if any("finished_as" in a for a in task["attempts"])]
        if finished:
            self.refresh(data.draw(st.sampled_from(finished)))

    @precondition(lambda self: bool(getattr(self, "model", None)))
    @rule(data=st.data(), key=KEYS, reason=REASONS)
    def retry_settled(self, data: st.DataObject, key: str, reason: str) -> None:
        """Retry a task that is not pending (the interesting states for retry)."""
        settled = [t for t, task in self.model.items()
                   if task["state"] in (COMPLETED, FAILED, BLOCKED, RUNNING)]
        if settled:
            self.retry(data.draw(st.sampled_from(settled)), key, reason)

    @rule(task_id=tasks)
    def refresh(self, task_id: str) -> None:
        self.run(self.services.refresher.refresh(task_id))
        task = self.model[task_id]
        latest = task["attempts"][-1] if task["attempts"] else None
        if latest and latest["state"] == RUNNING and "finished_as" in latest:
            latest["state"] = task["state"] = latest.pop("finished_as")

    @rule(task_id=tasks, key=KEYS, reason=REASONS)
    def retry(self, task_id: str, key: str, reason: str) -> None:
        task = self.model[task_id]
        timeout = self.driver.timeout_next
        try:
            attempt_id, _ = self.run(self.dispatcher.retry(task_id, key, reason))
        except DomainError as error:
            self._expect_refusal(task, key, reason, error)
            return
        if key in task["keys"]:
            original, original_reason = task["keys"][key]
            assert (attempt_id, reason) == (original, original_reason)
            if self.attempt(task, attempt_id)["state"] == "reserved":
                self._materialized(task, attempt_id, timeout)
            return
        assert task["state"] in (FAILED, BLOCKED)
        task["keys"][key] = (attempt_id, reason)
        task["attempts"].append({"id": attempt_id, "state": "reserved", "failure": None,
                                 "key": key, "reason": reason})
        self._materialized(task, attempt_id, timeout)

    def _expect_refusal(self, task: dict[str, Any], key: str, reason: str,
                        error: DomainError) -> None:
        if key in task["keys"]:
            assert isinstance(error, IdempotencyConflict) and task["keys"][key][1] != reason
        elif task["state"] not in (FAILED, BLOCKED):
            assert isinstance(error, TaskNotRetryable)
        else:
            latest = task["attempts"][-1]
            assert isinstance(error, InvalidTransition)
            assert latest["state"] == "reserved" and latest["failure"] is None

    @rule(task_id=tasks, key=KEYS, reason=REASONS)
    def retry_dry_run(self, task_id: str, key: str, reason: str) -> None:
        before = self.run(snapshot(self.database_url))
        jobs = dict(self.driver.creations)
        with contextlib.suppress(DomainError):  # refusals are checked by `retry`
            self.run(self.dispatcher.preview_retry(task_id, key, reason))
        assert self.run(snapshot(self.database_url)) == before, "a dry-run changed something"
        assert dict(self.driver.creations) == jobs

    @rule(task_id=tasks, chance=st.integers(0, 3))
    def cancel(self, task_id: str, chance: int) -> None:
        if chance:  # cancel one time in four: cancelled tasks end every story
            return
        task = self.model[task_id]
        try:
            self.run(self.writer.execute(CancelTask(task_id), "test"))
        except InvalidTransition:
            assert task["state"] in (COMPLETED, "cancelled")
            return
        assert task["state"] not in (COMPLETED, "cancelled")
        task["state"] = "cancelled"
        latest = task["attempts"][-1] if task["attempts"] else None
        if latest and latest["state"] in ("reserved", RUNNING):
            latest["state"] = "cancelled"

    @precondition(lambda self: bool(getattr(self, "model", None)))
    @rule(data=st.data(), result=st.sampled_from(["pass", "fail"]))
    def judge(self, data: st.DataObject, result: str) -> None:
        """A judge's verdict: recorded on an ended attempt only, and it never retries."""
        task_id = data.draw(st.sampled_from(sorted(self.model)))
        task = self.model[task_id]
        if not task["attempts"]:
            return
        attempt = data.draw(st.sampled_from(task["attempts"]))
        verdict = JudgeVerdict(f"jdg_{len(task['judges'])}", attempt["id"], "judge",
                               {"check": "tests"}, result, retry_suggested=result == "fail")
        try:
            self.run(self.writer.execute(RecordJudge(task_id, verdict), "test"))
        except InvalidTransition:
            assert attempt["state"] in ("reserved", RUNNING)
            return
        assert attempt["state"] not in ("reserved", RUNNING)
        task["judges"].append(attempt["id"])

    @invariant()
    def ledger_matches_the_model(self) -> None:
        if not getattr(self, "model", None):
            return
        rows = self.run(self.pool.fetch(
            "SELECT task_id, attempt_id, retry_index, state, run_id, runner_job_id, failure_kind"
            " FROM attempt_summary WHERE task_id = ANY($1) ORDER BY task_id, retry_index",
            list(self.model)))
        by_task: dict[str, list[Any]] = {}
        for row in rows:
            by_task.setdefault(row["task_id"], []).append(row)
        states = dict(self.run(self.pool.fetch(
            "SELECT task_id, state FROM task_summary WHERE task_id = ANY($1)",
            list(self.model))))
        for task_id, task in self.model.items():
            assert states[task_id] == task["state"]
            attempts = by_task.get(task_id, [])
            assert [r["retry_index"] for r in attempts] == list(range(len(attempts)))
            assert [(r["attempt_id"], r["state"]) for r in attempts] == [
                (a["id"], a["state"]) for a in task["attempts"]]
        assert len({(r["task_id"], r["attempt_id"]) for r in rows}) == len(rows)
        assert len({r["run_id"] for r in rows}) == len(rows)
        assert len({r["runner_job_id"] for r in rows}) == len(rows)
        assert all(n == 1 for n in self.driver.creations.values()), "a job was created twice"
        judged: dict[str, list[str]] = {}
        for row in self.run(self.pool.fetch(
                "SELECT task_id, attempt_id FROM judge_run WHERE task_id = ANY($1)"
                " ORDER BY change_seq", list(self.model))):
            judged.setdefault(row["task_id"], []).append(row["attempt_id"])
        assert judged == {t: task["judges"] for t, task in self.model.items() if task["judges"]}
        counts = dict(self.run(self.pool.fetch(
            "SELECT task_id, attempt_count FROM task_summary WHERE task_id = ANY($1)",
            list(self.model))))
        assert counts == {t: len(task["attempts"]) for t, task in self.model.items()}


def test_attempts_never_duplicate_and_replay_matches(database_url: str, tmp_path: Path) -> None:
    write_profile_secret(tmp_path)
    AttemptMachine.data_dir = tmp_path
    AttemptMachine.check(database_url, examples=30)
