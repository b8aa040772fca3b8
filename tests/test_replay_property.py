"""Stateful property test against real Postgres: for any sequence of submit, read and cancel
commands (alone or committed together in one batch), the live projections match a model,
the incremental stats equal a recount, and replaying the ledger reproduces them exactly."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    consumes,
    initialize,
    invariant,
    rule,
)

from ledger.errors import DomainError, InvalidRequest, InvalidTransition
from ledger.intake import submit_command
from ledger.task import CANCELLABLE, CancelTask, MarkTaskRead
from tests.support import WriterMachine

READERS = st.sampled_from(["ann", "bob", "cy"])
QUEUES = st.sampled_from(["alpha", "alpha/fast", "beta"])
PROFILES = st.sampled_from([None, "profile-1", "profile-4"])


class LedgerMachine(WriterMachine):
    """Drives the real writer from synchronous rules on a private event loop."""

    tasks = Bundle("tasks")

    @initialize()
    def start(self) -> None:
        self.open_ledger(max_size=3)

    def _apply_model(self, command: Any, error: BaseException | None) -> None:
        task = self.model[command.task_id]
        if isinstance(command, CancelTask):
            if task["state"] in CANCELLABLE and "\x00" in (command.reason or ""):
                assert isinstance(error, InvalidRequest), error  # jsonb cannot hold U+0000
            elif task["state"] in CANCELLABLE:
                assert error is None, error
                task["state"], task["version"] = "cancelled", task["version"] + 1
            else:
                assert isinstance(error, InvalidTransition)
        else:
            assert error is None, error
            task["cursors"][command.reader_id] = task["version"]

    @rule(target=tasks, queue=QUEUES, profile=PROFILES)
    def submit(self, queue: str, profile: str | None) -> str:
        body = {"tenantId": "t", "projectId": "p", "queue": queue, "title": "x",
                "payload": {"prompt": "p"}, "backendProfile": profile}
        command = submit_command(body, actor="test")
        self.run(self.writer.execute(command, "test"))
        self.model[command.task_id] = {"state": "pending", "version": 1, "cursors": {}}
        return command.task_id

    @rule(task_id=tasks, reason=st.none() | st.text(max_size=8))
    def cancel(self, task_id: str, reason: str | None) -> None:
        command = CancelTask(task_id, reason)
        self._apply_model(command, self._execute(command))

    @rule(task_id=tasks, reader=READERS)
    def read(self, task_id: str, reader: str) -> None:
        command = MarkTaskRead(task_id, reader)
        self._apply_model(command, self._execute(command))

    @rule(data=st.data(), size=st.integers(2, 6))
    def concurrent_batch(self, data: st.DataObject, size: int) -> None:
        """Several commands in flight at once: the writer commits them in one transaction."""
        if not self.model:
            return
        ids = st.sampled_from(sorted(self.model))
        commands = data.draw(st.lists(st.one_of(
            st.builds(CancelTask, ids, st.none()),
            st.builds(MarkTaskRead, ids, READERS)), min_size=size, max_size=size))

        async def all_at_once() -> list[Any]:
            return await asyncio.gather(
                *(self.writer.execute(c, "test") for c in commands), return_exceptions=True)

        results = self.run(all_at_once())
        for command, result in zip(commands, results, strict=True):
            self._apply_model(command, result if isinstance(result, BaseException) else None)

    @rule(task_id=consumes(tasks))
    def forget(self, task_id: str) -> None:
        """Stop using a task (keeps the bundle small)."""

    def _execute(self, command: Any) -> DomainError | None:
        try:
            self.run(self.writer.execute(command, "test"))
        except DomainError as error:
            return error
        return None

    @invariant()
    def projections_match_the_model(self) -> None:
        if not hasattr(self, "model") or not self.model:
            return
        rows = self.run(self.pool.fetch(
            "SELECT task_id, state, version FROM task_summary WHERE task_id = ANY($1)",
            list(self.model)))
        assert {r["task_id"]: (r["state"], r["version"]) for r in rows} == {
            k: (v["state"], v["version"]) for k, v in self.model.items()}
        cursors = self.run(self.pool.fetch(
            "SELECT reader_id, task_id, version FROM read_cursor WHERE task_id = ANY($1)",
            list(self.model)))
        assert {(r["reader_id"], r["task_id"]): r["version"] for r in cursors} == {
            (reader, k): version for k, v in self.model.items()
            for reader, version in v["cursors"].items()}

    @invariant()
    def stats_equal_a_recount(self) -> None:
        if not hasattr(self, "pool"):
            return
        counted = self.run(self.pool.fetch(
            "SELECT queue, lane, state, coalesce(backend_profile, '') AS p, count(*) AS n"
            " FROM task_summary GROUP BY 1, 2, 3, 4"))
        kept = self.run(self.pool.fetch(
            "SELECT queue, lane, state, backend_profile AS p, task_count AS n"
            " FROM queue_stats WHERE task_count <> 0"))
        assert Counter({tuple(r.values())[:4]: r["n"] for r in counted}) == Counter(
            {tuple(r.values())[:4]: r["n"] for r in kept})


def test_replay_equals_live_state_for_any_command_sequence(database_url: str) -> None:
    LedgerMachine.check(database_url, examples=25)
