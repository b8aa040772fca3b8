"""The one place that maps errors to HTTP: the error envelope of DESIGN.md 5."""

from __future__ import annotations

import logging

import msgspec
from litestar import Request, Response
from litestar.datastructures import State
from litestar.exceptions import HTTPException, ValidationException
from litestar.openapi import ResponseSpec
from litestar.types import Receive, Scope, Send

from api.wire import ErrorEnvelope
from ledger.errors import DomainError
from ledger.redaction import redact, redact_text
from ledger.states import FailureKind
from ledger.store import is_outage

log = logging.getLogger("svc.api")

STATUS_BY_CODE = {
    "invalid-request": 400,
    "schema-invalid": 400,
    "credential-in-request": 400,
    "unauthorized": 401,
    "unauthenticated": 401,
    "forbidden": 403,
    "not-found": 404,
    "method-not-allowed": 405,
    "payload-too-large": 413,
    "idempotency-conflict": 409,
    "task-not-retryable": 409,
    "invalid-transition": 409,
    "stream-version-conflict": 409,
    "secret-unavailable": 422,
    "tenant-policy-denied": 422,
    "prompt-unavailable": 422,
    "prompt-too-large": 422,
    "required-skill-unavailable": 422,
    "session-store-evicted": 422,
    "build-required": 422,
    "infra-failed": 503,
    "commit-unknown": 503,
    "ledger-corrupt": 503,
    "internal-error": 500,
    "session-limit-reached": 429,
    "tenant-mismatch": 403,
    "project-mismatch": 403,
}
ERROR_CODES = frozenset(STATUS_BY_CODE) | frozenset(FailureKind)
"""Every ``code`` an error answer may carry: the table's, and the failure kinds a refused
command or turn is answered with (400 unless the table names them)."""
RETRY_AFTER_S = 2
"""Seconds a 503 asks the caller to wait before it tries again."""
CHALLENGE = {"www-authenticate": "Bearer"}
"""Every 401 names the scheme a credential is sent in (RFC 9110 11.6.1)."""
CODE_BY_STATUS = {400: "invalid-request", 404: "not-found", 405: "method-not-allowed",
                  413: "payload-too-large", 503: "infra-failed"}


def envelope(code: str, message: str, details: dict[str, object] | None = None,
             status: int | None = None,
             headers: dict[str, str] | None = None) -> Response[bytes]:
    """An error response; message and details pass through the redaction function. A 503
    says when to try again (``Retry-After``)."""
    body = {"error": {"code": code, "message": redact_text(message).splitlines()[0][:500],
                      "details": redact(details or {})}}
    status = status or STATUS_BY_CODE.get(code, 400)
    if status == 503:
        headers = {"retry-after": str(RETRY_AFTER_S), **(headers or {})}
    return Response(
        content=msgspec.json.encode(body),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def error_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """OpenAPI: these statuses answer with the error envelope."""
    return {status: ResponseSpec(data_container=ErrorEnvelope, description=_DESCRIPTIONS[status],
                                 generate_examples=False)
            for status in statuses}


_DESCRIPTIONS = {
    400: "invalid-request (malformed JSON, wrong types, unknown fields, bad parameters), "
         "schema-invalid (SPEC 7) or credential-in-request",
    401: "unauthenticated (no valid credential: send Authorization: Bearer <API key or "
         "token>) or "
         "unauthorized (a runner-protocol call without its job's token); header "
         "WWW-Authenticate: Bearer",
    403: "forbidden (the key's roles do not allow this route), tenant-mismatch (the body "
         "names another tenant than the key's) or project-mismatch (a project outside the "
         "key's)",
    404: "not-found", 405: "method-not-allowed (header Allow lists the path's methods)",
    409: "invalid-transition, task-not-retryable, idempotency-conflict or "
         "stream-version-conflict",
    413: "payload-too-large (bodies over 1 MiB)",
    422: "secret-unavailable, tenant-policy-denied, prompt-unavailable, prompt-too-large, "
         "required-skill-unavailable, session-store-evicted or build-required",
    503: "infra-failed (also when the credential's issuer cannot be reached), "
         "commit-unknown (retry with the same Idempotency-Key) or ledger-corrupt",
    429: "session-limit-reached (the tenant holds SVC_MAX_SESSIONS_PER_TENANT live sessions)"}


def error_description(status: int) -> str:
    """What an error status of the API means (the OpenAPI response's description)."""
    return _DESCRIPTIONS[status]


READ_ERRORS = error_responses(400, 404, 503)
WRITE_ERRORS = error_responses(400, 404, 409, 413, 422, 503)
OPENING_ERRORS = {**WRITE_ERRORS, **error_responses(429)}
"""A write that may open a session (POST /sessions, dispatch): the tenant's cap too."""


def handle_exception(request: Request[object, object, State],
                     error: Exception) -> Response[bytes]:
    """Translate any exception raised while serving a request into the error envelope."""
    if isinstance(error, DomainError):
        status = STATUS_BY_CODE.get(error.code, 400)
        return envelope(error.code, error.message, error.details,
                        headers=CHALLENGE if status == 401 else None)
    if isinstance(error, ValidationException):
        problems = error.extra if isinstance(error.extra, list) else []
        return envelope("invalid-request", "invalid request parameters",
                        {"problems": [_problem(p) for p in problems]}, 400)
    if isinstance(error, HTTPException):
        status = error.status_code
        code = CODE_BY_STATUS.get(status, "invalid-request" if status < 500 else "infra-failed")
        message = {404: "no such route", 405: "method not allowed on this route",
                   413: "request body too large"}.get(status, str(error.detail))
        allow = (error.headers or {}).get("allow") if status == 405 else None
        methods = ", ".join(sorted(m.strip() for m in allow.split(","))) if allow else None
        return envelope(code, message, {"path": request.url.path}, status,
                        {"allow": methods} if methods else None)
    if is_outage(error):
        log.warning("database unreachable on %s %s: %s", request.method, request.url.path,
                    redact_text(repr(error)))
        return envelope("infra-failed", "the database does not answer; retry later",
                        {"database": "down"}, 503)
    log.error("unhandled error on %s %s: %s", request.method, request.url.path,
              redact_text(repr(error)))
    return envelope("internal-error", "internal error (see the server log for this request id)",
                    None, 500)


async def answer_error(scope: Scope, receive: Receive, send: Send, error: Exception) -> None:
    """Answer an error raised outside a route's own error handling (by a middleware, e.g.
    authentication) with :func:`handle_exception`, through ``send``."""
    request: Request[object, object, State] = scope["litestar_app"].request_class(
        scope=scope, receive=receive, send=send)
    response = handle_exception(request, error)
    await response.to_asgi_response(app=None, request=request)(scope, receive, send)


def _problem(problem: object) -> dict[str, str]:
    if isinstance(problem, dict):
        return {k: str(v) for k, v in problem.items() if k in ("key", "message", "source")}
    return {"message": str(problem)}
