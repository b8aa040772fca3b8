"""Real examples of the error envelope, one per code of ``api.errors.STATUS_BY_CODE``: what
the service answers, for the OpenAPI document's error responses."""

from __future__ import annotations

from api.errors import STATUS_BY_CODE
from ledger.jsonvalue import JSONObject

EXAMPLES: dict[str, tuple[str, JSONObject]] = {
    "invalid-request": ("Object missing required field `title` - at `$`", {"field": "title"}),
    "schema-invalid": ("contract.repoUrl must be an https URL or a local path",
                       {"field": "contract.repoUrl"}),
    "credential-in-request": ("the body holds a credential: pass secrets by name",
                              {"field": "contract.env.API_TOKEN"}),
    "unauthorized": ("the runner job's token is missing or not this job's", {}),
    "unauthenticated": ("the credential is unknown, revoked or expired", {}),
    "forbidden": ("this route needs the operator role",
                  {"role": "operator", "principal": "key_01HZX3"}),
    "tenant-mismatch": ("the credential acts for tenant acme, not globex",
                        {"tenantId": "globex"}),
    "project-mismatch": ("the credential is not scoped to project web", {"projectId": "web"}),
    "not-found": ("task tsk_01HZX3 not found", {"taskId": "tsk_01HZX3"}),
    "method-not-allowed": ("method DELETE not allowed", {}),
    "idempotency-conflict": ("idempotency key already used with a different body",
                             {"taskId": "tsk_01HZX3"}),
    "task-not-retryable": ("cannot retry a completed task",
                           {"taskId": "tsk_01HZX3", "state": "completed"}),
    "invalid-transition": ("cannot dispatch a running task",
                           {"taskId": "tsk_01HZX3", "state": "running"}),
    "stream-version-conflict": ("task tsk_01HZX3 changed meanwhile: read it and try again",
                                {"taskId": "tsk_01HZX3"}),
    "payload-too-large": ("the body is over 1048576 bytes", {}),
    "secret-unavailable": ("secret GITHUB_TOKEN of profile-1 is not configured",
                           {"name": "GITHUB_TOKEN"}),
    "tenant-policy-denied": ("tenant acme may not use secret NPM_TOKEN",
                             {"tenant": "acme", "name": "NPM_TOKEN"}),
    "prompt-unavailable": ("prompt ref prompts/review.md is not in the repository",
                           {"field": "payload.promptRef"}),
    "prompt-too-large": ("the prompt is 300000 bytes, over 262144", {"field": "payload.prompt"}),
    "required-skill-unavailable": ("skill lint-fix is not installed", {"skill": "lint-fix"}),
    "session-store-evicted": ("session ses_01HZX3's volume was evicted",
                              {"sessionId": "ses_01HZX3"}),
    "build-required": ("image svc-runner:dev must be built first: run `make image`", {}),
    "session-limit-reached": (
        "the tenant holds 20 live sessions, the most SVC_MAX_SESSIONS_PER_TENANT allows (20): "
        "end or let expire one before opening another",
        {"tenantId": "acme", "liveSessions": 20, "limit": 20}),
    "infra-failed": ("the database does not answer", {}),
    "commit-unknown": ("the commit's outcome is unknown: retry with the same "
                       "Idempotency-Key", {}),
    "ledger-corrupt": ("the ledger's hash chain breaks at changeSeq 4812",
                       {"changeSeq": 4812}),
    "internal-error": ("internal error (see the server log for this request id)", {}),
}


def examples_for(status: int) -> dict[str, JSONObject]:
    """OpenAPI examples of an error status: one per code answered with it, by code."""
    return {code: {"summary": code, "value": {"error": {
        "code": code, "message": message, "details": details}}}
        for code, (message, details) in EXAMPLES.items() if STATUS_BY_CODE[code] == status}
