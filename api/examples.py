"""Example request bodies of the OpenAPI document (a test sends each to the real API)."""

from __future__ import annotations

from ledger.jsonvalue import JSONObject

SUBMIT: JSONObject = {
    "tenantId": "acme", "projectId": "demo", "queue": "main", "title": "Say hello",
    "payload": {"prompt": "print hello"}, "priority": 50, "backendProfile": "profile-1",
    "metadata": {"ticket": "OPS-1"},
}
CANCEL: JSONObject = {"reason": "not needed"}
READ: JSONObject = {"readerId": "me"}
DISPATCH: JSONObject = {"transientEnv": {"OWNER": "me"}}
RETRY: JSONObject = {"idempotencyKey": "fix-1", "reason": "flaky network"}
JUDGE: JSONObject = {
    "judge": "review-bot", "request": {"rubric": "tests pass"}, "result": "fail",
    "failureKind": "backend-failed", "retrySuggested": True, "retryReason": "flaky test",
    "summary": "two tests failed", "judgeId": "judge-1",
}
RUNNER_JOB: JSONObject = {"transientEnv": {"OWNER": "me"}, "dryRun": True}
SESSION_CREATE: JSONObject = {"conversationId": "conv-1", "backendProfile": "profile-1"}
SESSION_READ: JSONObject = {"readerId": "me"}
CONTROL: JSONObject = {"action": "cancel", "reason": "enough"}
STORAGE: JSONObject = {
    "storageSizeBytes": 2048, "storageFilesCount": 3,
    "storageSha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}
COMMAND: JSONObject = {"payload": {"prompt": "lines: 3"}, "commandId": "cmd_1"}
MANIFEST: JSONObject = {
    "manifestVersion": "v1", "environment": "dev", "commitId": "0d6f3c1",
    "namespace": "svc-v01", "endpoint": "http://127.0.0.1:8080",
    "profiles": {"dev": {"name": "dev", "enabled": True, "namespace": "svc-v01"}},
    "services": [{"serviceId": "lab-agent-mgr", "namespace": "svc-v01", "profile": "dev",
                  "image": "registry.invalid/svc@sha256:" + "0" * 64,
                  "healthPath": "/api/v1/health", "replicas": 2}],
    "createdAt": "2026-11-22T00:00:00Z",
}
RUNNER_CLAIM: JSONObject = {
    "claimant": "a1b2c3d4", "startup": {"version": "0.1.0", "tools": [
        {"name": "git", "version": "2.39.5"}], "valuesPrinted": False}}
RUNNER_LINES: JSONObject = {"channel": "output", "seq": 1, "lines": ["hello"]}
RUNNER_ASSEMBLY: JSONObject = {"assembly": {"steps": ["project-profile-secret"]}}
RUNNER_THREAD: JSONObject = {"threadId": "thr_1", "mode": "start"}
RUNNER_HEARTBEAT: JSONObject = {}
RUNNER_EXIT: JSONObject = {
    "state": "completed", "exitCode": 0, "startedAt": "2026-11-23T10:00:00Z",
    "finishedAt": "2026-11-23T10:00:02Z"}
SUBMIT_BATCH: JSONObject = {"items": [
    {"idempotencyKey": "nightly-1", "task": {**SUBMIT, "title": "Say hello"}},
    {"idempotencyKey": "nightly-2", "task": {**SUBMIT, "title": "Say goodbye",
                                             "payload": {"prompt": "print goodbye"}}},
]}
