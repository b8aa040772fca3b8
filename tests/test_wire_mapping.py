"""The answer types against the projection rows they are built from: each stands alone, the
mapping in ``api.views`` carries every field it answers, and a row's own column reaches the
wire only when mapped."""

from __future__ import annotations

import enum
import itertools
import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from api import session_wire as sw
from api import views, wire
from cli import render
from cli.client import decoder_for
from ledger.states import AttemptStatus, TaskStatus
from projections.attempt_summary import AttemptRow
from projections.queries import CommanderResult, StatsResult, TaskPage
from projections.rows import (
    CommanderRow,
    JudgeRunRow,
    RunView,
    SessionHead,
    SessionView,
    StatsCounter,
    TaskItemRow,
    TurnFields,
)
from projections.task_summary import TaskSummaryRow

STORED_ATTEMPT = {
    "attemptId": "att_1", "retryIndex": 2, "state": "failed", "runId": "run_1",
    "commandId": "cmd_1", "runnerJobId": "job_1", "sessionId": "ses_1",
    "failureKind": "backend-failed", "failureMessage": "exit 3",
}
"""A ``latestAttempt`` as the task summary projection stores it (no ``sessionPath``)."""
_counter = itertools.count(1)


def _sample(kind: Any, name: str) -> Any:
    """A value of ``kind``, distinct per field, so a value carried to the wrong field shows."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        return _sample(next(a for a in typing.get_args(kind) if a is not type(None)), name)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return list(kind)[next(_counter) % len(kind)]
    if kind is bool:
        return next(_counter) % 2 == 0
    if kind is int:
        return next(_counter)
    if kind is str:
        return f"{name}-{next(_counter)}"
    if kind is datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=next(_counter))
    if typing.get_origin(kind) is dict:
        return {"key": f"{name}-{next(_counter)}"}
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return sample_row(kind)
    raise AssertionError(f"no sample for {kind!r}")


def sample_row(kind: type[Any], **given: Any) -> Any:
    """A row of ``kind`` with a distinct value in every field (``latest_attempt``: a stored
    one)."""
    values = {f.name: STORED_ATTEMPT if f.name == "latest_attempt" else _sample(f.type, f.name)
              for f in msgspec.structs.fields(kind)}
    return kind(**{**values, **given})


def _widened(kind: type[Any]) -> type[Any]:
    """``kind`` with one more column, as a projection might grow."""
    return msgspec.defstruct(f"Wider{kind.__name__}", [("internal_note", str)],
                             bases=(kind,), kw_only=True, frozen=True)


BUDGETS = {"main": "30m"}
MAPPINGS: dict[str, tuple[type[Any], Callable[[Any], msgspec.Struct]]] = {
    "task_detail": (TaskSummaryRow, lambda r: views.task_detail(r, {"c": 1}, BUDGETS)),
    "task_list": (TaskItemRow, lambda r: views.task_list(TaskPage([r], None, 9), BUDGETS)),
    "commander": (CommanderRow, lambda r: views.commander(
        None, None, CommanderResult([r], StatsResult([], {}, {}, {}, False, 9)), BUDGETS)),
    "queue_stats": (StatsCounter, lambda r: views.queue_stats(
        None, StatsResult([r], {}, {}, {}, False, 9))),
    "attempt": (AttemptRow, lambda r: views.attempt(r, BUDGETS, "main")),
    "judge_run": (JudgeRunRow, views.judge_run),
    "runner_job": (RunView, views.runner_job),
    "session_item": (SessionHead, views.session_item),
    "session_detail": (SessionView, lambda r: views.session_detail(
        r, [sample_row(TurnFields)], 4, 5, "me")),
}
COMPUTED = {"sessionPath", "supervisor", "contract", "workReady", "durationMs", "outputRef",
            "judgeRuns", "recentTurns", "outputLastSeq", "traceLastSeq", "readerId",
            "valuesPrinted", "failureKind", "usage"}
"""Answer fields the views compute rather than copy from the row of the same name
(``failureKind`` of a commander item is its latest attempt's)."""


def _camel(name: str) -> str:
    """A row's field name as the wire spells it (some rows keep snake_case)."""
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


def _answers(answer: msgspec.Struct) -> list[dict[str, Any]]:
    """The objects of an answer built from one row (a page's single item)."""
    shown = msgspec.to_builtins(answer)
    for key in ("items", "rows"):
        if key in shown:
            return [shown[key][0]]
    return [shown]


def _wire_types() -> list[type[msgspec.Struct]]:
    return [kind for module in (wire, sw) for kind in vars(module).values()
            if isinstance(kind, type) and issubclass(kind, msgspec.Struct)
            and kind.__module__ == module.__name__]


@pytest.mark.parametrize("kind", _wire_types(), ids=lambda k: k.__name__)
def test_no_wire_type_extends_a_projection_row(kind: type[msgspec.Struct]) -> None:
    """A field added to a projection row type never becomes part of an answer by itself."""
    assert not [base for base in kind.__mro__ if base.__module__.startswith("projections")]


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_the_mapping_carries_every_row_field_the_answer_names(name: str) -> None:
    """Each answer field of the row's name holds the row's value (a forgotten field would
    hold its default); every other answer field is one the views compute."""
    row_kind, build = MAPPINGS[name]
    row = sample_row(row_kind)
    stored = {_camel(key): value for key, value in msgspec.to_builtins(row).items()}
    (answer,) = _answers(build(row))
    for key, value in answer.items():
        if key == "latestAttempt":
            assert value == msgspec.to_builtins(views.latest_attempt(STORED_ATTEMPT))
        elif key in stored:
            assert value == stored[key], (name, key)
        else:
            assert key in COMPUTED, (name, key)


@pytest.mark.parametrize("name", sorted(MAPPINGS))
def test_a_new_projection_column_does_not_reach_the_answer(name: str) -> None:
    row_kind, build = MAPPINGS[name]
    plain = _answers(build(sample_row(row_kind)))
    wider = _answers(build(sample_row(_widened(row_kind), internal_note="secret")))
    assert all("internalNote" not in item for item in wider)
    assert [list(item) for item in wider] == [list(item) for item in plain]


def test_projection_only_fields_stay_off_the_wire() -> None:
    detail = msgspec.to_builtins(views.task_detail(sample_row(TaskSummaryRow), {}, BUDGETS))
    assert "latestStartedAt" not in detail
    commander = _answers(views.commander(None, None, CommanderResult(
        [sample_row(CommanderRow)], StatsResult([], {}, {}, {}, False, 1)), BUDGETS))[0]
    assert not {"changeSeq", "latestAttempt"} & set(commander)


def test_latest_attempt_is_typed_with_its_session_path_after_the_session_id() -> None:
    latest = views.latest_attempt(STORED_ATTEMPT)
    assert isinstance(latest, wire.LatestAttempt)
    assert latest.state is AttemptStatus.FAILED
    assert msgspec.to_builtins(latest) == {
        "attemptId": "att_1", "retryIndex": 2, "state": "failed", "runId": "run_1",
        "commandId": "cmd_1", "runnerJobId": "job_1", "sessionId": "ses_1",
        "sessionPath": "/api/v1/sessions/ses_1", "failureKind": "backend-failed",
        "failureMessage": "exit 3", "usage": None}
    assert list(msgspec.to_builtins(latest)) == [*list(STORED_ATTEMPT)[:7], "sessionPath",
                                                 "failureKind", "failureMessage", "usage"]
    assert views.latest_attempt(None) is None


def test_the_cli_reads_the_typed_latest_attempt(capsys: pytest.CaptureFixture[str]) -> None:
    """The answer's JSON decoded by the CLI prints the attempt line as before."""
    row = sample_row(TaskSummaryRow, task_id="tsk_1", state=TaskStatus.FAILED, queue="main")
    text = msgspec.json.encode(views.task_detail(row, {}, BUDGETS))
    render.task_summary(decoder_for(wire.TaskDetail).decode(text))
    lines = capsys.readouterr().out.splitlines()
    assert "failure=backend-failed" in lines[0]
    assert "  attempt: att_1 #2 failed failure=backend-failed run=run_1 session=ses_1" in lines
    assert "  sessionPath: /api/v1/sessions/ses_1" in lines
