"""Examples of the success answers, by answer schema, for the OpenAPI document: what the
service answers on the core paths (a test validates each against its schema)."""

from __future__ import annotations

from ledger.jsonvalue import JSONObject

TASK_ID = "tsk_01m8g9t0z8tcrjj7f305ca2ff1"
ATTEMPT_ID = "att_01m8g9t0z8mcanyq0v7y641a0j"
RUN_ID = "run_01m8g9t0z89btddvwqtz9k1x75"
SESSION_ID = "ses_01m8g9t0z8k8cz3ghzsm8nv3c4"
JOB_ID = "job_5d0c2b8e61f4a7d9c3b1e0f2a4"
AT = "2026-11-23T10:00:02.512Z"
SUPERVISOR: JSONObject = {
    "phase": "done", "lastActivitySeq": 4812, "lastActivityId": ATTEMPT_ID,
    "timeoutBudget": "30m", "recovery": 'svc queue retry ' + TASK_ID
    + ' --idempotency-key <new-key> --reason "<why>"'}
USAGE: JSONObject = {"inputTokens": 12840, "cachedInputTokens": 9216, "outputTokens": 733,
                     "reasoningOutputTokens": 256}
LATEST: JSONObject = {
    "attemptId": ATTEMPT_ID, "retryIndex": 0, "state": "failed", "runId": RUN_ID,
    "commandId": "cmd_01m8g9t0z8rsb5kcph0w8jbygy", "runnerJobId": JOB_ID,
    "sessionId": SESSION_ID, "sessionPath": f"/api/v1/sessions/{SESSION_ID}",
    "failureKind": "backend-failed", "failureMessage": "failed: exit code 1",
    "usage": USAGE}
TASK_ITEM: JSONObject = {
    "taskId": TASK_ID, "tenantId": "acme", "projectId": "demo", "queue": "main",
    "lane": "default", "title": "Say hello", "priority": 50, "state": "failed",
    "backendProfile": "profile-1", "summary": "failed: exit code 1", "version": 3,
    "changeSeq": 4812, "latestAttempt": LATEST, "sessionPath": LATEST["sessionPath"],
    "createdAt": "2026-11-23T10:00:00.104Z", "updatedAt": AT, "supervisor": SUPERVISOR}
TASK_DETAIL: JSONObject = {
    **TASK_ITEM, "payloadHash":
        "9b7f0e4c2a1d8e6f3b5a7c9d1e3f5a7b9c1d3e5f7a9b1c3d5e7f9a1b3c5d7e9f",
    "creator": "key_01HZX3", "contract": {
        "tenantId": "acme", "projectId": "demo", "queue": "main", "title": "Say hello",
        "payload": {"prompt": "print hello"}, "priority": 50, "backendProfile": "profile-1",
        "metadata": {"ticket": "OPS-1"}},
    "workReady": None, "attemptCount": 1, "lastDurationMs": 2408}
JUDGE_RUN: JSONObject = {
    "taskId": TASK_ID, "judgeId": "jdg_review_1", "attemptId": ATTEMPT_ID,
    "judge": "review-bot", "result": "fail", "failureKind": "backend-failed",
    "retrySuggested": True, "retryReason": "flaky test", "summary": "two tests failed",
    "request": {"rubric": "tests pass"}, "changeSeq": 4813, "createdAt": AT}
ATTEMPT: JSONObject = {
    "attemptId": ATTEMPT_ID, "taskId": TASK_ID, "retryIndex": 0, "state": "failed",
    "idempotencyKey": None, "reason": None, "previousAttemptId": None, "runId": RUN_ID,
    "commandId": LATEST["commandId"], "runnerJobId": JOB_ID, "sessionId": SESSION_ID,
    "sessionPath": LATEST["sessionPath"], "backendProfile": "profile-1",
    "failureKind": "backend-failed", "failureMessage": "failed: exit code 1", "exitCode": 1,
    "changeSeq": 4812, "createdAt": "2026-11-23T10:00:00.204Z",
    "startedAt": "2026-11-23T10:00:00.104Z", "finishedAt": AT, "updatedAt": AT,
    "durationMs": 2408, "supervisor": SUPERVISOR, "usage": USAGE,
    "outputRef": {"sessionId": SESSION_ID, "runnerJobId": JOB_ID,
                  "path": f"/api/v1/sessions/{SESSION_ID}/output"},
    "judgeRuns": [JUDGE_RUN]}
DRY_RUN: JSONObject = {"mutation": False, "plan": {
    "command": "dispatch", "taskId": TASK_ID, "stateBefore": "pending",
    "stateAfter": "running", "versionBefore": 1, "versionAfter": 2,
    "events": ["task-attempt-reserved", "task-dispatched"]}}
EXAMPLES: dict[str, JSONObject] = {
    "TaskDetail": TASK_DETAIL,
    "TaskList": {"items": [TASK_ITEM], "nextCursor": None, "changeSeq": 4812},
    "Attempt": ATTEMPT,
    "AttemptList": {"items": [ATTEMPT], "nextCursor": None, "changeSeq": 4813},
    "JudgeRun": JUDGE_RUN,
    "BatchSubmitResult": {"items": [TASK_DETAIL]},
    "QueueStats": {
        "queue": "main", "total": 3, "byState": {"pending": 1, "running": 1, "failed": 1},
        "byLane": {"default": 3}, "byBackendProfile": {"profile-1": 3},
        "rows": [{"queue": "main", "lane": "default", "state": "failed",
                  "backendProfile": "profile-1", "count": 1}],
        "truncated": False, "changeSeq": 4813, "tokensByQueue": {"main": USAGE},
        "tokensByBackendProfile": {"profile-1": USAGE}},
    "CommanderView": {
        "queue": "main", "readerId": "me", "byState": {"failed": 1},
        "items": [{"taskId": TASK_ID, "queue": "main", "lane": "default",
                   "title": "Say hello", "state": "failed", "version": 3, "unread": True,
                   "sessionPath": LATEST["sessionPath"], "supervisor": SUPERVISOR,
                   "failureKind": "backend-failed"}],
        "changeSeq": 4813},
    "DryRun": DRY_RUN,
    "LinePage": {
        "sessionId": SESSION_ID, "channel": "output", "items": [
            {"seq": 1, "runnerJobId": JOB_ID, "line": "> print hello",
             "recordedAt": "2026-11-23T10:00:01.020Z", "stream": "stdout"},
            {"seq": 2, "runnerJobId": JOB_ID, "line": "hello",
             "recordedAt": "2026-11-23T10:00:01.022Z", "stream": "stdout"}],
        "nextAfterSeq": 2, "lastSeq": 2, "running": False},
    "Health": {
        "status": "ok", "version": "0.1.0", "database": "ok", "changeSeq": 4813,
        "workReady": {"version": "0.1.0", "tools": [{"name": "python", "version": "3.11.7"},
                                                    {"name": "git", "version": "2.39.5"}],
                      "dependencyPolicy": "service dependencies are fixed at install time; "
                                          "runs never install base tools",
                      "valuesPrinted": False},
        "migrations": "current", "sandbox": "bwrap", "backendNetwork": "pasta"},
    "Live": {"status": "ok", "version": "0.1.0"},
    "ManifestReport": {"valid": False, "violations": [
        {"path": "$.services[0].replicas", "message": "0 is less than the minimum of 1"}]},
}
"""An example of each answer schema the core operations answer with."""

REF = "#/components/schemas/"


def attach(responses: JSONObject) -> None:
    """Give each 2xx answer of ``responses`` the example of its schema: one ``example``, or
    for a mutation's union with ``DryRun`` one example of each (``examples``)."""
    for status, answer in responses.items():
        content = answer.get("content") if isinstance(answer, dict) else None
        media = content.get("application/json") if isinstance(content, dict) else None
        if not status.startswith("2") or not isinstance(media, dict):
            continue
        schema = media.get("schema")
        names = _names(schema)
        if len(names) == 1 and names[0] in EXAMPLES:
            media["example"] = EXAMPLES[names[0]]
        elif len(names) > 1 and all(name in EXAMPLES for name in names):
            media["examples"] = {name: {"summary": _summary(name), "value": EXAMPLES[name]}
                                 for name in names}


def _names(schema: object) -> list[str]:
    """The answer schemas a media schema names: one ``$ref``, or each of a ``oneOf``."""
    if not isinstance(schema, dict):
        return []
    listed = schema.get("oneOf")
    refs = [schema] if "$ref" in schema else listed if isinstance(listed, list) else []
    return [str(ref["$ref"]).removeprefix(REF) for ref in refs
            if isinstance(ref, dict) and isinstance(ref.get("$ref"), str)]


def _summary(name: str) -> str:
    return "with dryRun=true: what would change" if name == "DryRun" else name
