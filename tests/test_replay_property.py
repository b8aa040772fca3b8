"""Stateful property test against real Postgres: for any sequence of submit, read and cancel
commands (alone, committed together in one batch, or in flight at once on two writers as two
server processes would be), the live projections match a model, the incremental stats equal
a recount, and replaying the ledger reproduces them exactly."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import asyncpg
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    consumes,
    initialize,
    invariant,
    rule,
)

from ledger.database import create_pool
from ledger.errors import DomainError, InvalidRequest, InvalidTransition
from ledger.intake import submit_command
from ledger.task import CANCELLABLE, CancelTask, MarkTaskRead
from ledger.writer import LedgerWriter
from projections.store import plan_projection
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
        # A second server process's writer: its own pool, its own idea of the head.
        self.other_pool = self.run(create_pool(self.database_url, min_size=1, max_size=2))
        self.other_writer = LedgerWriter(self.other_pool, plan_projection)
        self.run(self.other_writer.start())

    def other_pools(self) -> list[asyncpg.Pool]:
        return [self.other_pool]

    def teardown(self) -> None:
        if hasattr(self, "other_writer"):
            self.run(self.other_writer.close())
        super().teardown()

    def _writer(self, second: bool) -> LedgerWriter:
        return self.other_writer if second else self.writer

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

    @rule(target=tasks, queue=QUEUES, profile=PROFILES, second=st.booleans())
    def submit(self, queue: str, profile: str | None, second: bool) -> str:
        command = self._submit_command(queue, profile)
        self.run(self._writer(second).execute(command, "test"))
        self.model[command.task_id] = {"state": "pending", "version": 1, "cursors": {}}
        return command.task_id

    def _submit_command(self, queue: str, profile: str | None) -> Any:
        body = {"tenantId": "t", "projectId": "p", "queue": queue, "title": "x",
                "payload": {"prompt": "p"}, "backendProfile": profile}
        return submit_command(body, actor="test")

    @rule(task_id=tasks, reason=st.none() | st.text(max_size=8), second=st.booleans())
    def cancel(self, task_id: str, reason: str | None, second: bool) -> None:
        command = CancelTask(task_id, reason)
        self._apply_model(command, self._execute(command, second))

    @rule(task_id=tasks, reader=READERS, second=st.booleans())
    def read(self, task_id: str, reader: str, second: bool) -> None:
        command = MarkTaskRead(task_id, reader)
        self._apply_model(command, self._execute(command, second))

    @rule(data=st.data(), submits=st.integers(0, 4))
    def two_writers_at_once(self, data: st.DataObject, submits: int) -> None:
        """Commands in flight on both writers at once, as two server processes would send
        them: submits, cancels of distinct tasks and reads of others, so the model needs no
        order among them; every commit must still land once, in one changeSeq order."""
        ids = sorted(self.model)
        cancelled = data.draw(st.lists(st.sampled_from(ids), unique=True, max_size=3)
                              if ids else st.just([]))
        others = [task_id for task_id in ids if task_id not in cancelled]
        read = data.draw(st.lists(st.tuples(st.sampled_from(others), READERS), unique=True,
                                  max_size=3) if others else st.just([]))
        commands: list[Any] = [CancelTask(task_id, None) for task_id in cancelled]
        commands += [MarkTaskRead(task_id, reader) for task_id, reader in read]
        commands += [self._submit_command(data.draw(QUEUES), data.draw(PROFILES))
                     for _ in range(submits)]
        sides = data.draw(st.lists(st.booleans(), min_size=len(commands),
                                   max_size=len(commands)))

        async def all_at_once() -> list[Any]:
            return await asyncio.gather(
                *(self._writer(second).execute(command, "test")
                  for command, second in zip(commands, sides, strict=True)),
                return_exceptions=True)

        results = self.run(all_at_once())
        for command, result in zip(commands, results, strict=True):
            if isinstance(command, CancelTask | MarkTaskRead):
                self._apply_model(command, result if isinstance(result, BaseException) else None)
            else:
                assert not isinstance(result, BaseException), result
                self.model[command.task_id] = {"state": "pending", "version": 1, "cursors": {}}

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

    def _execute(self, command: Any, second: bool = False) -> DomainError | None:
        try:
            self.run(self._writer(second).execute(command, "test"))
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
