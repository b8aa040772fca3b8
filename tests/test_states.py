"""The state vocabulary: mappings between layers, and stored events unchanged by the enums."""

from __future__ import annotations

import msgspec
import pytest

from ledger.events import (
    AttemptFinished,
    AttemptMaterializationFailed,
    RunFinished,
    SessionTurnFinished,
    TaskEvent,
    event_encoder,
    run_event_decoder,
    session_event_decoder,
    task_event_decoder,
)
from ledger.states import (
    AttemptStatus,
    FailureKind,
    JobState,
    RunStatus,
    SessionStatus,
    TaskStatus,
    TurnStatus,
    attempt_outcome,
    job_state_of_failure,
    run_status_of,
    session_status_after,
    task_status_after,
    turn_status_of,
)
from ledger.task import OUTCOMES

TERMINAL_JOBS = [state for state in JobState if state != JobState.RUNNING]


@pytest.mark.parametrize("job", TERMINAL_JOBS)
def test_every_terminal_job_state_has_an_attempt_outcome_and_a_task_state(job: JobState) -> None:
    outcome, kind = attempt_outcome(job)
    assert outcome in OUTCOMES
    assert task_status_after(outcome) in TaskStatus
    assert (kind == FailureKind.RUNNER_CANCELLED) == (job == JobState.CANCELLED)


@pytest.mark.parametrize("job", list(JobState))
def test_every_job_state_is_recorded_on_the_run_and_the_turn(job: JobState) -> None:
    assert run_status_of(job) == job.value
    assert turn_status_of(job) == job.value
    assert session_status_after(turn_status_of(job)) in SessionStatus


def test_a_running_job_has_no_outcome_yet() -> None:
    with pytest.raises(ValueError):
        attempt_outcome(JobState.RUNNING)


def test_blockers_block_and_other_failures_fail() -> None:
    assert job_state_of_failure(FailureKind.SECRET_UNAVAILABLE) == JobState.BLOCKED
    assert job_state_of_failure(FailureKind.INFRA_FAILED) == JobState.FAILED
    assert job_state_of_failure("a-kind-a-backend-named") == JobState.FAILED


def test_events_with_states_encode_as_before_and_decode_to_the_enums() -> None:
    stored = b'{"type":"task-attempt-finished","attempt_id":"att_1","outcome":"blocked",' \
             b'"failure_kind":"made-up-by-a-backend","failure_message":null,"exit_code":3}'
    event = task_event_decoder.decode(stored)
    assert isinstance(event, AttemptFinished)
    assert event.outcome is AttemptStatus.BLOCKED
    assert event_encoder.encode(event) == stored
    failed: TaskEvent = AttemptMaterializationFailed("att_1", "infra-failed", "boom")
    assert msgspec.json.decode(event_encoder.encode(failed))["attempt_state"] == "reserved"
    run = run_event_decoder.decode(event_encoder.encode(RunFinished(RunStatus.CANCELLED)))
    assert isinstance(run, RunFinished) and run.status is RunStatus.CANCELLED
    turn = session_event_decoder.decode(event_encoder.encode(
        SessionTurnFinished("job_1", TurnStatus.FAILED)))
    assert isinstance(turn, SessionTurnFinished) and turn.status is TurnStatus.FAILED


STORED_BEFORE_SHARED_BASES = [
    b'{"type":"task-submitted","task_id":"tsk_1","tenant_id":"ten","project_id":"prj",'
    b'"queue":"q","lane":"default","title":"T","priority":3,"backend_profile":null,'
    b'"contract":{"a":1},"payload_hash":"h","creator":"me"}',
    b'{"type":"task-read-cursor-advanced","reader_id":"rdr","version":4}',
    b'{"type":"task-cancelled","reason":"why"}',
    b'{"type":"task-cancelled","reason":null}',
    b'{"type":"run-created","run_id":"run_1","task_id":"tsk_1","attempt_id":"att_1",'
    b'"command_id":"cmd_1","runner_job_id":"job_1","session_id":"ses_1",'
    b'"conversation_id":"cnv_1","backend_profile":"codex","resource_bundle_ref":'
    b'{"repoUrl":"u"},"prompt_sha256":"sha","prompt_bytes":5,"base":null}',
    b'{"type":"session-cancelled","reason":null}',
    b'{"type":"session-read","reader_id":"rdr","version":2}',
    b'{"type":"run-finished","status":"failed","exit_code":3,"failure_kind":"infra-failed",'
    b'"failure_message":"boom"}',
    b'{"type":"session-turn-finished","runner_job_id":"job_1","status":"completed",'
    b'"thread_id":"thr_1","failure_kind":null,"failure_message":null,"exit_code":0}',
]


@pytest.mark.parametrize("stored", STORED_BEFORE_SHARED_BASES)
def test_events_on_shared_bases_keep_their_stored_bytes(stored: bytes) -> None:
    """Events whose fields moved into shared base Structs decode and re-encode unchanged."""
    kind = msgspec.json.decode(stored)["type"]
    decoder = (run_event_decoder if kind.startswith("run-") else session_event_decoder
               if kind.startswith("session-") else task_event_decoder)
    expected = stored
    if kind == "task-submitted":  # a field added later with a default is appended (issue 14)
        expected = stored[:-1] + b',"idempotency_key":null}'
    assert event_encoder.encode(decoder.decode(stored)) == expected
