"""Domain errors of the write side; each carries a stable kebab-case code."""

from __future__ import annotations

from ledger.states import FailureKind


class DomainError(Exception):
    """A refusal with a stable ``code``; the API maps codes to HTTP statuses in one place."""

    code = "invalid-request"

    def __init__(self, message: str | None = None, **details: object) -> None:
        self.message = message or (self.__doc__ or self.code).strip().splitlines()[0]
        self.details = details
        super().__init__(self.message)


class InvalidRequest(DomainError):
    """The request is malformed or has fields of the wrong type."""

    code = "invalid-request"


class NotFound(DomainError):
    """No such resource."""

    code = "not-found"


class InvalidTransition(DomainError):
    """The command is not allowed in the task's current state."""

    code = "invalid-transition"


class StreamVersionConflict(DomainError):
    """Another writer appended to the stream first."""

    code = "stream-version-conflict"


class LedgerUnavailable(DomainError):
    """The ledger could not be written now; retry (the same idempotency key never twins)."""

    code: str = FailureKind.INFRA_FAILED


class TaskNotRetryable(DomainError):
    """Only failed or blocked tasks can be retried with a new key."""

    code = "task-not-retryable"


class IdempotencyConflict(DomainError):
    """This idempotency key was already used with a different reason (retry) or body (submit)."""

    code = "idempotency-conflict"


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

    code = "ledger-corrupt"


class CommitUnknown(DomainError):
    """The connection was lost while committing: the change may or may not be stored.
    Retry with the same idempotency key."""

    code = "commit-unknown"


class Unauthorized(DomainError):
    """The runner token is missing, unknown, of another job, or its job has ended."""

    code = "unauthorized"
