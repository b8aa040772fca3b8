"""What a dry run shows: the operation, the states around it, the events it would append."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from ledger.writer import Outcome


@dataclass(frozen=True)
class Preview:
    """What a dry run would do: the operation, the states around it, its events, extras."""

    operation: str
    task_id: str | None
    before: object
    after: object
    events: Sequence[msgspec.Struct]
    extra: dict[str, object] = field(default_factory=dict)

    @classmethod
    def of(cls, operation: str, task_id: str | None, outcome: Outcome,
           **extra: object) -> Preview:
        """The preview of a planned command's outcome."""
        return cls(operation, task_id, outcome.before, outcome.state, outcome.events, extra)
