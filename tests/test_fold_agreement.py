"""Property: the projection folds hold the task and attempt states the decision fold holds."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from ledger import task as rules
from ledger.errors import DomainError
from ledger.events import AttemptEnd, JudgeVerdict, TaskEvent
from ledger.streams import RecordedEntry
from projections import attempt_summary, task_summary
from projections.attempt_summary import AttemptRow
from projections.task_summary import TaskSummaryRow

TASK = "tsk_1"
ATTEMPTS = st.sampled_from([f"att_{n}" for n in range(5)])
FAILURE_KINDS = st.sampled_from(["secret-unavailable", "build-required", "infra-failed",
                                 "driver-error"])
OUTCOMES = st.sampled_from(["completed", "failed", "blocked", "running", "bogus"])
MOMENT = datetime(2026, 1, 1, tzinfo=UTC)


def submit() -> rules.SubmitTask:
    """A minimal valid submit command."""
    return rules.SubmitTask(task_id=TASK, tenant_id="t", project_id="p", queue="q", lane="default",
                            title="x", priority=50, backend_profile=None, contract={},
                            payload_hash="0" * 64, creator="test")


class FoldAgreement(RuleBasedStateMachine):
    """Drives ``decide``/``evolve`` in memory and folds the projections over the entries."""

    def __init__(self) -> None:
        super().__init__()
        self.state: rules.TaskState | None = None
        self.row: TaskSummaryRow | None = None
        self.attempts: dict[str, AttemptRow] = {}
        self.seq = 0
        self.fresh = 0

    def run(self, command: rules.TaskCommand) -> None:
        """Decide; on success fold the events into the decision state and the projections."""
        try:
            events = rules.decide(self.state, command)
        except DomainError:
            return
        for event in events:
            self.state = rules.evolve(self.state, event)
            self.project(event)

    def project(self, event: TaskEvent) -> None:
        """Fold one event, as a recorded entry, through the projection ``evolve`` functions."""
        assert self.state is not None
        self.seq += 1
        entry = RecordedEntry(self.seq, "task", TASK, self.state.version, event, "test",
                              MOMENT)
        attempt_id = attempt_summary.attempt_id_of(entry)
        if attempt_id is None and self.row is not None and self.row.latest_attempt:
            attempt_id = self.row.latest_attempt["attemptId"]  # a cancel: the latest attempt
        self.row = task_summary.evolve(self.row, entry)
        if attempt_id is not None:
            after = attempt_summary.evolve(self.attempts.get(attempt_id), entry)
            if after is not None:
                self.attempts[attempt_id] = after

    def ids(self, attempt_id: str | None = None) -> rules.AttemptIds:
        """Fresh identities (``attempt_id`` when the caller names one)."""
        self.fresh += 1
        return rules.AttemptIds(attempt_id or f"att_new{self.fresh}", f"run_{self.fresh}",
                                f"cmd_{self.fresh}", f"job_{self.fresh}", f"ses_{self.fresh}",
                                "codex")

    def known(self, index: int) -> str:
        """An attempt id of the task (or an unknown one when there are none)."""
        attempts = self.state.attempts if self.state else ()
        return attempts[index % len(attempts)].attempt_id if attempts else "att_none"

    @initialize(submitted=st.booleans())
    def start(self, submitted: bool) -> None:
        if submitted:
            self.run(submit())

    @rule()
    def submit_again(self) -> None:
        self.run(submit())

    @rule(named=st.none() | ATTEMPTS)
    def dispatch(self, named: str | None) -> None:
        self.run(rules.DispatchTask(TASK, self.ids(named), named=named is not None))

    @rule(key=st.sampled_from(["k1", "k2", "k3"]), reason=st.sampled_from(["r1", "r2"]))
    def retry(self, key: str, reason: str) -> None:
        self.run(rules.RetryTask(TASK, key, reason, self.ids()))

    @rule(index=st.integers(0, 6), unknown=st.booleans())
    def materialize(self, index: int, unknown: bool) -> None:
        self.run(rules.MaterializeAttempt(TASK, "att_unknown" if unknown else self.known(index)))

    @rule(index=st.integers(0, 6), kind=FAILURE_KINDS)
    def fail_materialization(self, index: int, kind: str) -> None:
        self.run(rules.FailMaterialization(TASK, self.known(index), kind, "no job"))

    @rule(index=st.integers(0, 6), outcome=OUTCOMES, kind=st.none() | FAILURE_KINDS,
          exit_code=st.none() | st.integers(0, 2))
    def finish(self, index: int, outcome: str, kind: str | None, exit_code: int | None) -> None:
        self.run(rules.FinishAttempt(TASK, AttemptEnd(self.known(index), outcome, kind, "why",
                                                     exit_code)))

    @rule(reason=st.none() | st.sampled_from(["stop", ""]))
    def cancel(self, reason: str | None) -> None:
        self.run(rules.CancelTask(TASK, reason))

    @rule(reader=st.sampled_from(["a", "b"]))
    def read(self, reader: str) -> None:
        self.run(rules.MarkTaskRead(TASK, reader))

    @rule(index=st.integers(0, 6), judge_id=st.sampled_from(["jdg_1", "jdg_2"]),
          result=st.sampled_from(["pass", "fail"]), retry=st.booleans())
    def judge(self, index: int, judge_id: str, result: str, retry: bool) -> None:
        """A judge's verdict: recorded on an ended attempt, and never a retry."""
        attempts = len(self.state.attempts) if self.state else 0
        self.run(rules.RecordJudge(TASK, JudgeVerdict(
            judge_id, self.known(index), "judge", {"check": "tests"}, result,
            "tests-failed" if result == "fail" else None, retry)))
        assert (len(self.state.attempts) if self.state else 0) == attempts

    @invariant()
    def projections_agree_with_the_decision_fold(self) -> None:
        if self.state is None:
            assert self.row is None and not self.attempts
            return
        assert self.row is not None
        assert (self.row.state, self.row.version) == (self.state.state, self.state.version)
        assert self.row.attempt_count == len(self.state.attempts)
        assert all(self.state.attempt(v.attempt_id) is not None
                   for v in self.state.judges.values())
        assert {a.attempt_id: (a.state, a.failure_kind) for a in self.state.attempts} == {
            i: (row.state, row.failure_kind) for i, row in self.attempts.items()}
        latest = self.state.latest
        shown = self.row.latest_attempt
        if latest is None:
            assert shown is None
        else:
            assert shown is not None
            assert (shown["attemptId"], shown["state"], shown["failureKind"]) == (
                latest.attempt_id, latest.state, latest.failure_kind)


FoldAgreement.TestCase.settings = settings(max_examples=300, stateful_step_count=40,
                                           deadline=None)
test_projection_folds_agree_with_the_decision_fold = FoldAgreement.TestCase


def test_an_older_attempt_materialised_after_a_retry_leaves_the_latest_as_it_is() -> None:
    machine = FoldAgreement()
    machine.run(submit())
    machine.dispatch(None)
    machine.materialize(0, unknown=False)
    machine.finish(0, "failed", None, 1)
    machine.retry("k1", "r")
    machine.fail_materialization(1, "infra-failed")  # the retry's attempt stays reserved
    machine.retry("k2", "r")
    machine.materialize(1, unknown=False)  # the older, still reserved attempt
    assert machine.state is not None and machine.state.state == "running"
    machine.projections_agree_with_the_decision_fold()
