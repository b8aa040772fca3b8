"""The typed failure of an assembly step, shared by the manager and the runner."""

from __future__ import annotations

from ledger.states import FailureKind

MINIMAL_PATH = "/usr/local/bin:/usr/bin:/bin"
"""The only PATH a runner or backend starts from; nothing is inherited."""


class AssemblyFailure(Exception):
    """A step of assembly failed; ``kind`` is the SPEC 7 failure kind."""

    def __init__(self, kind: FailureKind, message: str,
                 details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.details = details or {}
