"""Issue 26 item 7 (DESIGN 13): ``transientEnv`` never carries a loader, libc, shell,
interpreter or git start-up variable, and a volume tool credential never covers
``BACKEND_HOME`` (its credential files, the session directory) or the runner's own places.

Every entry carrying assembly inputs refuses them alike, through the one gate: 400
``schema-invalid`` naming the variable or field (never the value), nothing stored."""

from __future__ import annotations

from typing import Any

import pytest

from ledger.errors import DomainError
from runner_assembly.assembly import model
from tests.support import snapshot, task_body
from tests.test_assembly_model import volume_policy

TASKS = "/api/v1/queue/tasks"
SESSIONS = "/api/v1/sessions"
CANARY = "/tmp/canary-start-up-value-7f3a.so"
"""The value every refused variable carries: it must never appear in an answer."""

START_UP = ["LD_PRELOAD", "LD_AUDIT", "LD_LIBRARY_PATH", "LD_BIND_NOW", "DYLD_INSERT_LIBRARIES",
            "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "PROMPT_COMMAND",
            "GLIBC_TUNABLES", "GCONV_PATH", "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH",
            "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT", "PERL5OPT", "PERL5LIB", "RUBYOPT",
            "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "GIT_CONFIG_COUNT",
            "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0", "GIT_CONFIG_PARAMETERS",
            "GIT_CONFIG_GLOBAL", "GIT_CONFIG", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS",
            "GIT_EXEC_PATH", "GIT_PROXY_COMMAND", "GIT_DIR", "GIT_TEMPLATE_DIR",
            "GIT_EXTERNAL_DIFF", "GIT_TRACE", "XDG_CONFIG_HOME", "SSH_ASKPASS", "PATH",
            "HOME", "BACKEND_HOME", "SVC_FETCH_ALLOW_HOSTS", "SVC_WORKSPACE_PATH",
            "HTTPS_PROXY", "SSL_CERT_FILE"]
ORDINARY = ["OWNER", "TICKET", "GIT_AUTHOR_NAME", "GIT_COMMITTER_EMAIL", "NODE_ENV",
            "EXT_MAIN_SERVER_HOST", "LAB_API_KEY", "LDAP_HOST", "PYTHON_", "ENVIRONMENT"]
"""Names that look alike but start nothing (``PYTHON_`` aside: every ``PYTHON*`` is refused)."""
ORDINARY.remove("PYTHON_")

PROTECTED_MOUNTS = ["/home/svc/", "/home/svc/.backend", "/home/svc/.backend/",
                    "/home/svc/.backend/auth.json", "/home/svc/.backend/sessions",
                    "/home/svc/.backend/sessions/esc/dropped", "/home/svc//.backend",
                    "/home/svc/./.backend/x", "/home/svc/.svc", "/home/svc/.gitbundle/svc/k"]


@pytest.mark.parametrize("name", START_UP)
def test_each_start_up_name_is_refused_naming_it(name: str) -> None:
    with pytest.raises(DomainError) as refused:
        model.check_names({name: CANARY})
    assert refused.value.code == "schema-invalid"
    assert name in str(refused.value) and CANARY not in str(refused.value)


@pytest.mark.parametrize("name", ORDINARY)
def test_ordinary_names_are_accepted(name: str) -> None:
    model.check_names({name: "x"})


@pytest.mark.parametrize("path", PROTECTED_MOUNTS)
def test_a_mount_over_the_runner_s_places_is_refused(path: str) -> None:
    with pytest.raises(DomainError) as refused:
        model.check_mount_path(path, "mountPath")
    assert refused.value.code == "schema-invalid"


@pytest.mark.parametrize("path", ["/home/svc/.ssh", "/home/svc/keys", "/home/svc/.backendx",
                                  "/home/svc/tools/creds/"])
def test_other_mounts_below_home_stay_accepted(path: str) -> None:
    model.check_mount_path(path, "mountPath")


def _env_bodies() -> list[tuple[str, str, Any]]:
    """(entry, path template, body) of every entry with every start-up name."""
    wraps: list[tuple[str, str, Any]] = [
        ("submit", TASKS, lambda env: task_body(transientEnv=env)),
        ("session", SESSIONS, lambda env: {"runBase": {"transientEnv": env}}),
        ("dispatch", TASKS + "/{task}/dispatch", lambda env: {"transientEnv": env}),
        ("runner-job", "/api/v1/runs/{run}/runner-job", lambda env: {"transientEnv": env}),
        ("command", "/api/v1/runs/{run}/commands",
         lambda env: {"payload": {"prompt": "go"}, "transientEnv": env}),
    ]
    return [(entry, path, (name, wrap({name: CANARY})))
            for entry, path, wrap in wraps for name in START_UP]


def _mount_bodies() -> list[tuple[str, str, Any]]:
    """(entry, path template, body) of every entry carrying a tool credential's mount."""
    rows: list[tuple[str, str, Any]] = []
    for mount in PROTECTED_MOUNTS:
        fields = volume_policy("git-host", "pull-request", ["password"], mount)
        rows.append(("submit", TASKS, (mount, task_body(**fields))))
        rows.append(("session", SESSIONS, (mount, {"runBase": fields})))
    return rows


ROWS = _env_bodies() + _mount_bodies()
ENTRIES = sorted({row[0] for row in ROWS})


@pytest.mark.parametrize("entry", ENTRIES)
async def test_every_entry_refuses_start_up_names_and_protected_mounts(
    client: Any, database_url: str, entry: str
) -> None:
    task = (await client.post(TASKS, json=task_body())).json()["taskId"]
    run = (await client.post(SESSIONS, json={})).json()["runId"]
    before = await snapshot(database_url)
    wrong = []
    for name, path, (what, body) in ROWS:
        if name != entry:
            continue
        response = await client.post(path.format(task=task, run=run), json=body)
        error = response.json().get("error", {})
        named = "mountPath" if what.startswith("/") else f"transientEnv.{what}"
        if response.status_code != 400 or error.get("code") != "schema-invalid" \
                or named not in error.get("message", ""):
            wrong.append((what, response.status_code, response.text[:200]))
        assert CANARY not in response.text, (entry, what, "the value is never echoed")
    assert wrong == [], f"{entry}: {wrong}"
    assert await snapshot(database_url) == before, f"{entry}: a refusal changed something"


def test_the_schema_states_the_same_names() -> None:
    """The OpenAPI document's name rule refuses every start-up name too."""
    import jsonschema

    schema = {"pattern": r"^[A-Z_][A-Z0-9_]*$", **model.TRANSIENT_NAME_SCHEMA}
    for name in START_UP:
        assert not jsonschema.Draft202012Validator(schema).is_valid(name), name
    for name in ORDINARY:
        assert jsonschema.Draft202012Validator(schema).is_valid(name), name
