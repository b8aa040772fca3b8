"""The runner-job stream's pure rules, without a database."""

from __future__ import annotations

from typing import Any

import pytest

from ledger import events as ev
from ledger.errors import InvalidTransition, Unauthorized
from ledger.runner_job import (
    ClaimJob,
    EndJob,
    Heartbeat,
    IssueJobToken,
    ReportExit,
    ReportThread,
    RunnerJobState,
    decide,
    evolve,
)


def run(commands: list[Any]) -> tuple[RunnerJobState | None, list[list[Any]]]:
    state: RunnerJobState | None = None
    produced = []
    for command in commands:
        events = decide(state, command)
        produced.append(events)
        for event in events:
            state = evolve(state, event)
    return state, produced


def issue(sha: str) -> IssueJobToken:
    return IssueJobToken("job_1", session_id="ses_1", run_id="run_1", token_sha256=sha,
                         at="2026-11-23T10:00:00+00:00")


def test_the_first_claim_wins_and_every_issued_token_counts_until_the_end() -> None:
    state, produced = run([issue("h1"), issue("h2"), issue("h1"),
                           ClaimJob("job_1", "h1", "one", "2026-11-23T10:00:01+00:00"),
                           ClaimJob("job_1", "h2", "two", "2026-11-23T10:00:02+00:00"),
                           Heartbeat("job_1", "h2", "2026-11-23T10:00:03+00:00")])
    assert state is not None and state.claimant == "one"
    assert state.token_hashes == {"h1", "h2"} and produced[2] == []
    assert produced[4] == [], "a second claimant appends nothing"
    assert state.last_seen == "2026-11-23T10:00:03+00:00"
    exit_ = ReportExit("job_1", "h1", ev.JobExit("completed", 0))
    assert decide(state, exit_) == [ev.JobExited("completed", 0)]
    after = evolve(state, ev.JobExited("completed", 0))
    assert decide(after, exit_) == [], "the same report resent (its answer lost) is a no-op"
    assert decide(evolve(after, ev.JobEnded("finished")), exit_) == [], "also once ended"
    with pytest.raises(Unauthorized):
        decide(after, ReportExit("job_1", "h1", ev.JobExit("failed", 1)))
    with pytest.raises(Unauthorized):
        decide(after, ReportExit("job_1", "other", ev.JobExit("completed", 0)))
    with pytest.raises(Unauthorized):
        decide(after, Heartbeat("job_1", "h1", "x"))
    ended = evolve(state, ev.JobEnded("cancelled"))
    with pytest.raises(Unauthorized):
        decide(ended, Heartbeat("job_1", "h1", "x"))
    with pytest.raises(InvalidTransition):
        decide(ended, issue("h3"))
    assert decide(ended, EndJob("job_1", "again")) == []


def test_unknown_tokens_and_unclaimed_reports_are_refused() -> None:
    state, _ = run([issue("h1")])
    with pytest.raises(Unauthorized):
        decide(state, ClaimJob("job_1", "other", "one", "x"))
    with pytest.raises(Unauthorized):
        decide(None, ClaimJob("job_1", "h1", "one", "x"))
    with pytest.raises(InvalidTransition):
        decide(state, ReportThread("job_1", "h1", "thr", "start"))
    assert decide(None, EndJob("job_1", "x")) == []
