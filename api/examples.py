"""Example request bodies of the OpenAPI document (a test sends each to the real API)."""

from __future__ import annotations

from typing import Any

SUBMIT: dict[str, Any] = {
    "tenantId": "acme", "projectId": "demo", "queue": "main", "title": "Say hello",
    "payload": {"prompt": "print hello"}, "priority": 50, "backendProfile": "profile-1",
    "metadata": {"ticket": "OPS-1"},
}
CANCEL: dict[str, Any] = {"reason": "not needed"}
READ: dict[str, Any] = {"readerId": "me"}
DISPATCH: dict[str, Any] = {"transientEnv": {"OWNER": "me"}}
RETRY: dict[str, Any] = {"idempotencyKey": "fix-1", "reason": "flaky network"}
JUDGE: dict[str, Any] = {
    "judge": "review-bot", "request": {"rubric": "tests pass"}, "result": "fail",
    "failureKind": "backend-failed", "retrySuggested": True, "retryReason": "flaky test",
    "summary": "two tests failed", "judgeId": "judge-1",
}
RUNNER_JOB: dict[str, Any] = {"transientEnv": {"OWNER": "me"}, "dryRun": True}
SESSION_CREATE: dict[str, Any] = {"conversationId": "conv-1", "backendProfile": "profile-1"}
SESSION_READ: dict[str, Any] = {"readerId": "me"}
CONTROL: dict[str, Any] = {"action": "cancel", "reason": "enough"}
STORAGE: dict[str, Any] = {
    "storageSizeBytes": 2048, "storageFilesCount": 3,
    "storageSha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
}
COMMAND: dict[str, Any] = {"payload": {"prompt": "lines: 3"}, "commandId": "cmd_1"}
MANIFEST: dict[str, Any] = {
    "manifestVersion": "v1", "environment": "dev", "commitId": "0d6f3c1",
    "namespace": "svc-v01", "endpoint": "http://127.0.0.1:8080",
    "profiles": {"dev": {"name": "dev", "enabled": True, "namespace": "svc-v01"}},
    "services": [{"serviceId": "lab-agent-mgr", "namespace": "svc-v01", "profile": "dev",
                  "image": "registry.invalid/svc@sha256:" + "0" * 64,
                  "healthPath": "/api/v1/health", "replicas": 2}],
    "createdAt": "2026-11-22T00:00:00Z",
}
RUNNER_CLAIM: dict[str, Any] = {
    "claimant": "a1b2c3d4", "startup": {"version": "0.1.0", "tools": [
        {"name": "git", "version": "2.39.5"}], "valuesPrinted": False}}
RUNNER_LINES: dict[str, Any] = {"channel": "output", "seq": 1, "lines": ["hello"]}
RUNNER_ASSEMBLY: dict[str, Any] = {"assembly": {"steps": ["project-profile-secret"]}}
RUNNER_THREAD: dict[str, Any] = {"threadId": "thr_1", "mode": "start"}
RUNNER_HEARTBEAT: dict[str, Any] = {}
RUNNER_EXIT: dict[str, Any] = {
    "state": "completed", "exitCode": 0, "startedAt": "2026-11-23T10:00:00Z",
    "finishedAt": "2026-11-23T10:00:02Z"}
