"""Domain errors of the write side; each carries a stable kebab-case code."""

from __future__ import annotations

import re

from ledger.states import FailureKind


class DomainError(Exception):
    """A refusal with a stable ``code``; the API maps codes to HTTP statuses in one place."""

    code = "invalid-request"

    def __init_subclass__(cls) -> None:
        """A direct subclass that names no ``code`` takes its class name in kebab case."""
        super().__init_subclass__()
        if "code" not in cls.__dict__ and DomainError in cls.__bases__:
            cls.code = re.sub(r"(?<!^)(?=[A-Z])", "-", cls.__name__).lower()

    def __init__(self, message: str | None = None, **details: object) -> None:
        self.message = message or (self.__doc__ or self.code).strip().splitlines()[0]
        self.details = details
        super().__init__(self.message)


class InvalidRequest(DomainError):
    """The request is malformed or has fields of the wrong type."""


class NotFound(DomainError):
    """No such resource."""


class InvalidTransition(DomainError):
    """The command is not allowed in the task's current state."""


class StreamVersionConflict(DomainError):
    """Another writer appended to the stream first."""


class LedgerUnavailable(DomainError):
    """The ledger could not be written now; retry (the same idempotency key never twins)."""

    code: str = FailureKind.INFRA_FAILED


class TaskNotRetryable(DomainError):
    """Only failed or blocked tasks can be retried with a new key."""


class IdempotencyConflict(DomainError):
    """This idempotency key was already used with a different reason (retry) or body (submit)."""


class SessionStoreEvicted(DomainError):
    """The session's volume was evicted: no command can run in it."""

    code: str = FailureKind.SESSION_STORE_EVICTED


class Refused(DomainError):
    """A refusal whose code is a SPEC 7 failure kind (e.g. ``secret-unavailable``)."""

    def __init__(self, code: str, message: str, **details: object) -> None:
        super().__init__(message, **details)
        self.code = code


class LedgerCorrupt(DomainError):
    """A ledger entry cannot be decoded: the stream it belongs to cannot be folded."""


class CommitUnknown(DomainError):
    """The connection was lost while committing: the change may or may not be stored.
    Retry with the same idempotency key."""


class Unauthorized(DomainError):
    """The runner token is missing, unknown, of another job, or its job has ended."""
