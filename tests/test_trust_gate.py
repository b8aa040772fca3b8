"""Issue 13: one gate for every entry, credentials refused at intake, nothing rewritten."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from api.body import CredentialInRequest, check_strings
from cli import render
from ledger.redaction import holds_credential
from runner_assembly.assembly import model
from tests.support import snapshot, task_body
from tests.test_assembly_model import REFUSED, bundle

TASKS = "/api/v1/queue/tasks"
SESSIONS = "/api/v1/sessions"
RUN_BASE_FIELDS = frozenset(model.ASSEMBLY_FIELDS) - {"transientEnv"}

# --- the bad inputs of tests/, by the field that carries them ---------------------------

ASSEMBLY_INPUTS: list[tuple[str, dict[str, Any], str]] = [
    *[(case, fields, code) for case, fields, code in REFUSED if set(fields) <= RUN_BASE_FIELDS],
    *[(f"old input {old} in bundles[]", {"resourceBundleRef": bundle(bundles=[
        {"subpath": "a", "target_path": "a", old: []}])}, "schema-invalid")
      for old in model.OLD_BUNDLE_INPUTS],
    ("repo URL with a user", {"workspaceRef": {"repoUrl": "https://user@git.example.org/x"}},
     "schema-invalid"),
    ("repo URL with user:password", {"workspaceRef": {
        "repoUrl": "https://user:hunter2@git.example.org/x.git"}}, "credential-in-request"),
    ("prompt path ../../etc/passwd", {"resourceBundleRef": bundle(promptRefs=[
        {"name": "p", "path": "../../etc/passwd"}])}, "schema-invalid"),
    ("bundle repo URL with a password", {"resourceBundleRef": bundle(bundles=[
        {"subpath": "a", "target_path": "a",
         "repoUrl": "https://bot:s3cr3t-pass@git.example.org/x.git"}])},
     "credential-in-request"),
]
"""Assembly inputs (workspaceRef, resourceBundleRef, executionPolicy): submit and session
run bases carry them."""

ENV_INPUTS: list[tuple[str, dict[str, str], str]] = [
    ("credential name GIT_HOST_TOKEN", {"GIT_HOST_TOKEN": "v"}, "schema-invalid"),
    ("credential name OPENAI_API_KEY", {"OPENAI_API_KEY": "v"}, "schema-invalid"),
    ("a *_PASSWORD name", {"DB_PASSWORD": "v"}, "schema-invalid"),
    ("a *_PRIVATE_KEY name", {"DEPLOY_PRIVATE_KEY": "v"}, "schema-invalid"),
    ("runner name PATH", {"PATH": "/evil"}, "schema-invalid"),
    ("runner name LD_PRELOAD", {"LD_PRELOAD": "/evil.so"}, "schema-invalid"),
    ("runner prefix SVC_", {"SVC_WORKSPACE_PATH": "/"}, "schema-invalid"),
    ("lower-case name", {"lower-case": "v"}, "invalid-request"),
    ("too long a value", {"FOO": "x" * 5000}, "invalid-request"),
]
"""``transientEnv``: dispatch, the runner-job API and run commands carry it."""

CREDENTIALS: dict[str, str] = {
    "ghp_": "ghp_" + "A1b2C3d4E5" * 4,
    "gho_": "gho_" + "Z9y8X7w6V5" * 3,
    "ghu_": "ghu_" + "k" * 30,
    "ghs_": "ghs_" + "0123456789" * 3,
    "ghr_": "ghr_" + "Rr" * 16,
    "github_pat_": "github_pat_11ABCDEFG0" + "x_y" * 10,
    "glpat-": "glpat-" + "abc-DEF_123" * 2,
    "xoxb-": "xoxb-123456789012-abcdefABCDEF",
    "xoxp-": "xoxp-1234-5678-9abc-def0",
    "sk-": "sk-proj-" + "Q" * 24,
    "AKIA": "AKIA" + "IOSFODNN7EXAMPLE",
    "ASIA": "ASIA" + "Y3TEMPORARYKEYID",
    "AIza": "AIza" + "SyD-3xampleGoogleApiKey_01234567890",
    "sk_live_": "sk_live_" + "51H" + "q2W3e4R5t6Y7u8I9o0P",
    "rk_test_": "rk_test_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "npm_": "npm_" + "a1B2c3D4e5F6g7H8i9J0" + "k1L2m3N4o5P6q7R8",
    "pypi-": "pypi-AgEIcHlwaS5vcmc" + "CJDk4ZjM2NjM4LTA5ZTgtNDY1Zi05ZDQwLTk0OGFkZjU1YjQ2NQ",
    "glrt-": "glrt-" + "t1_" + "xYz0123456789abcdEFG",
    "Slack webhook": "https://hooks.slack.com/services/T0000/B0000/" + "XyZ" * 8,
    "xapp-": "xapp-1-A0123-4567-" + "abcdef0123456789",
    "JWT": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r",
    "private key": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA\n",
    "URL password": "https://deploy:Pa55@w0rd@git.example.org/repo.git",
}


def _run_base(fields: dict[str, Any]) -> dict[str, Any]:
    return {"runBase": fields}


Entry = tuple[str, str, Callable[[dict[str, Any]], dict[str, Any]]]
"""(name, path template, the body an input field goes into)."""

RUN_BASE_ENTRIES: list[Entry] = [
    ("submit", TASKS, lambda fields: task_body(**fields)),
    ("session", SESSIONS, _run_base),
]
ENV_ENTRIES: list[Entry] = [
    ("dispatch", TASKS + "/{task}/dispatch", lambda fields: fields),
    ("runner-job", "/api/v1/runs/{run}/runner-job", lambda fields: fields),
    ("command", "/api/v1/runs/{run}/commands",
     lambda fields: {"payload": {"prompt": "go"}, **fields}),
]
CREDENTIAL_PLACES: list[tuple[str, str, dict[str, Any] | Callable[[str], dict[str, Any]]]] = [
    ("submit", TASKS, lambda v: task_body(payload={"prompt": f"use {v} please"})),
    ("submit", TASKS, lambda v: task_body(title=v[:200])),
    ("submit", TASKS, lambda v: task_body(metadata={"nested": [{"note": v}]})),
    ("session", SESSIONS, lambda v: _run_base({"metadata": {"note": v}})),
    ("session", SESSIONS, lambda v: _run_base({"workspaceRef": {"metadata": {"k": [v]}}})),
    ("dispatch", TASKS + "/{task}/dispatch", lambda v: {"transientEnv": {"TICKET": v}}),
    ("runner-job", "/api/v1/runs/{run}/runner-job", lambda v: {"transientEnv": {"TICKET": v}}),
    ("command", "/api/v1/runs/{run}/commands", lambda v: {"payload": {"prompt": v}}),
    ("command", "/api/v1/runs/{run}/commands",
     lambda v: {"payload": {"prompt": "go"}, "transientEnv": {"TICKET": v}}),
]


def matrix() -> list[tuple[str, str, str, Any, str]]:
    """Every bad input x every entry that accepts its field: (entry, case, path, body, code)."""
    rows: list[tuple[str, str, str, Any, str]] = []
    for name, path, wrap in RUN_BASE_ENTRIES:
        rows += [(name, case, path, wrap(fields), code) for case, fields, code in ASSEMBLY_INPUTS]
    for name, path, wrap in ENV_ENTRIES:
        rows += [(name, case, path, wrap({"transientEnv": env}), code)
                 for case, env, code in ENV_INPUTS]
    for name, path, place in CREDENTIAL_PLACES:
        assert callable(place)
        rows += [(name, f"credential {shape}", path, place(value), "credential-in-request")
                 for shape, value in CREDENTIALS.items()]
    return rows


MATRIX = matrix()
ENTRIES = sorted({row[0] for row in MATRIX})


def test_the_gate_matrix_size(capsys: pytest.CaptureFixture[str]) -> None:
    cases = {row[1] for row in MATRIX}
    with capsys.disabled():
        print(f"\ngate matrix: {len(MATRIX)} requests ({len(cases)} bad inputs x "
              f"{len(ENTRIES)} entries, each where it accepts the field)")
    assert len(ENTRIES) == 5 and len(MATRIX) > 150


@pytest.mark.parametrize("entry", ENTRIES)
async def test_every_bad_input_is_refused_alike_at_every_entry(
    client: Any, database_url: str, entry: str
) -> None:
    task = (await client.post(TASKS, json=task_body())).json()["taskId"]
    run = (await client.post(SESSIONS, json={})).json()["runId"]
    before = await snapshot(database_url)
    wrong = []
    for name, case, path, body, code in MATRIX:
        if name != entry:
            continue
        response = await client.post(path.format(task=task, run=run), json=body)
        answer = response.json()
        got = answer.get("error", {}).get("code")
        if response.status_code != 400 or got != code:
            wrong.append((case, response.status_code, got, code))
        if code == "credential-in-request":
            assert answer["error"]["details"]["path"].startswith("$"), answer
            for value in CREDENTIALS.values():
                assert value[:24] not in response.text, (case, "the value is never echoed")
    assert wrong == [], f"{entry}: refused differently: {wrong}"
    assert await snapshot(database_url) == before, f"{entry}: a refusal changed something"


async def test_the_refusal_names_the_json_path_never_the_value(client: Any) -> None:
    token = CREDENTIALS["ghp_"]
    response = await client.post(TASKS, json=task_body(
        payload={"prompt": "x"}, references=[{"a": 1}, {"notes": ["ok", f"see {token}"]}]))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "credential-in-request"
    assert error["details"] == {"path": "$.references[1].notes[1]"}
    assert token not in response.text and token[:10] not in response.text


def test_the_runtime_key_is_the_one_key_a_body_may_carry() -> None:
    key = CREDENTIALS["sk-"]
    check_strings({"transientEnv": {"LAB_API_KEY": key}})
    with pytest.raises(CredentialInRequest):
        check_strings({"transientEnv": {"OWNER_HINT": key}})
    with pytest.raises(CredentialInRequest):
        check_strings({"payload": {"LAB_API_KEY": key}})


# --- nothing rewritten -------------------------------------------------------------------

ORDINARY = [
    "Fix TestHttpClientRetriesOnTimeoutWith503Status in client_test.go",
    "src/main/java/com/example/service/OrderProcessingService2.java",
    "token = computeToken(user)",
    "uuid 123e4567-e89b-12d3-a456-426614174000 and commit 9fceb02d0ae598e95dc970b74767f19372d61af8",
    "base64 c2VjcmV0LWxvb2tpbmctYnV0LWp1c3QtZGF0YQ== and dGVzdA==",
    "ids tsk_01HZX3K9Q8W7E6R5T4Y3U2I1O0 run_abcdefABCDEF0123456789 sha256:" + "ab" * 32,
    "the sk-1 key, task-sk-lane, AKIA-short, ghp_short, eyJ.not.a.jwt",
    "npm_install, sk_live_mode, AIza-short, pypi-package, glrt-short, hooks.slack.com/ docs",
    "ssh://git@github.com:22/acme/repo.git and git@github.com:acme/repo.git",
    "path/with spaces/and.dots/../relative " + "x" * 20_000,
]


@pytest.mark.parametrize("text", ORDINARY, ids=range(len(ORDINARY)))
def test_ordinary_text_holds_no_credential(text: str) -> None:
    assert not holds_credential(text)
    check_strings({"payload": {"prompt": text}})


@pytest.mark.parametrize("shape", sorted(CREDENTIALS))
def test_each_credential_shape_is_detected(shape: str) -> None:
    assert holds_credential(CREDENTIALS[shape])
    with pytest.raises(CredentialInRequest) as refused:
        check_strings({"payload": {"prompt": f"x {CREDENTIALS[shape]} y"}})
    assert refused.value.details == {"path": "$.payload.prompt"}


async def test_the_contract_is_stored_and_shown_as_sent(client: Any) -> None:
    prompt = "\n".join(ORDINARY)
    body = task_body(payload={"prompt": prompt}, title=ORDINARY[0][:200],
                     metadata={"token": "computeToken", "files": ORDINARY[1:3]})
    created = await client.post(TASKS, json=body)
    assert created.status_code == 201, created.text
    shown = (await client.get(f"{TASKS}/{created.json()['taskId']}")).json()
    assert shown["contract"]["payload"]["prompt"] == prompt
    assert shown["contract"]["metadata"] == body["metadata"]
    assert shown["title"] == body["title"]


PRINTED = [line for line in ORDINARY if not line.startswith("token =")]
"""What the CLI prints unchanged (``token = …`` pairs stay under the pattern net)."""


@pytest.mark.parametrize("line", PRINTED, ids=range(len(PRINTED)))
def test_the_cli_prints_names_ids_and_paths_unchanged(
    line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    render.out(f"tests/fixtures/{line[:80]}: valid")
    render.full({"path": line, "files": [line]})
    assert capsys.readouterr().out.splitlines() == [
        f"tests/fixtures/{line[:80]}: valid", f"path: {line}", "files:", f"  - {line}"]
