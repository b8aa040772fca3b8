"""The runtime assembly model (SPEC 2.7-2.10, 5.2, 8) as enforced at submit."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest

from ledger.errors import DomainError
from runner_assembly.assembly import model
from runner_assembly.assembly.profiles import PROFILE_SECRETS, canonical_profile
from runner_assembly.settings import RunnerSettings
from tests.grants_support import granting
from tests.support import snapshot, task_body

TASKS = "/api/v1/queue/tasks"
SHA = "0123456789abcdef0123456789abcdef01234567"


def bundle(**overrides: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "kind": "gitbundle", "repoUrl": "https://example.org/canary.git", "ref": "main",
        "commitId": SHA,
        "bundles": [{"subpath": "tools", "target_path": "tools"},
                    {"subpath": "skills", "target_path": ".agents/skills"}],
        "promptRefs": [{"name": "system", "path": "prompts/system.md", "required": True}],
        "requiredSkills": [{"name": "review"}],
        "credentialRef": {"name": "repo-read", "keys": ["token"]},
    }
    value.update(overrides)
    return value


def bundled(**overrides: Any) -> dict[str, Any]:
    """Contract fields with a ``resourceBundleRef`` changed by ``overrides``."""
    return {"resourceBundleRef": bundle(**overrides)}


def prompt_ref(path: str, **fields: Any) -> dict[str, Any]:
    """Contract fields whose bundle has the one prompt reference ``path``."""
    return bundled(promptRefs=[{"name": "p", "path": path, **fields}])


def tool(tool_name: str, purpose: str, keys: list[str], projection: dict[str, Any]) -> Any:
    return {"secretScope": {"toolCredentials": [{
        "tool": tool_name, "purpose": purpose,
        "secretRef": {"namespace": "svc-v01", "name": "tool-secret", "keys": keys},
        "projection": projection}]}}


def env_policy(tool_name: str, purpose: str, keys: list[str], env_name: str) -> Any:
    """Contract fields with one tool credential projected as the env variable ``env_name``."""
    return {"executionPolicy": tool(tool_name, purpose, keys,
                                    {"kind": "env", "envName": env_name})}


def volume_policy(tool_name: str, purpose: str, keys: list[str], mount_path: str) -> Any:
    """Contract fields with one tool credential projected as a volume at ``mount_path``."""
    return {"executionPolicy": tool(tool_name, purpose, keys,
                                    {"kind": "volume", "mountPath": mount_path})}


GOOD_POLICIES = [
    tool("git-host", "pull-request", ["GIT_HOST_TOKEN"],
         {"kind": "env", "envName": "GIT_HOST_TOKEN"}),
    tool("ext-ssh", "ssh-passthrough", ["EXT_SSH_CLIENT_TOKEN"],
         {"kind": "env", "envName": "EXT_SSH_CLIENT_TOKEN"}),
    tool("git-host", "git-host-ssh", ["id_ed25519", "known_hosts", "config"],
         {"kind": "volume", "mountPath": "/home/svc/.ssh"}),
    {"secretScope": {"providerCredentials": [
        {"name": "svc-v01-provider-profile-1", "keys": ["auth.json", "config.toml"]}]}},
]


@pytest.fixture
def runner_settings(runner_settings: RunnerSettings) -> RunnerSettings:
    """The shared settings, with ``acme`` granted the secrets these contracts name."""
    policies = granting(*[p["secretScope"]["toolCredentials"][0] for p in GOOD_POLICIES[:3]],
                        repositories={"repo-read": ["example.org"]})
    return dataclasses.replace(runner_settings, defaults=msgspec.structs.replace(
        runner_settings.defaults, tenantPolicies=policies))


async def test_a_full_assembly_contract_is_accepted_and_stored(client: Any) -> None:
    body = task_body(resourceBundleRef=bundle(), executionPolicy=GOOD_POLICIES[0],
                     workspaceRef={"repoUrl": "https://example.org/w.git", "branch": "main",
                                   "metadata": {"workbench": "x"}},
                     sessionRef={"sessionId": "ses_1", "conversationId": "cnv_1",
                                 "threadId": None})
    response = await client.post(TASKS, json=body)
    assert response.status_code == 201, response.text
    stored = response.json()["contract"]
    assert stored["resourceBundleRef"]["bundles"][1]["target_path"] == ".agents/skills"
    assert stored["resourceBundleRef"]["promptRefs"][0]["inject"] == "thread-start"


@pytest.mark.parametrize("policy", GOOD_POLICIES)
async def test_each_valid_tool_credential_shape_is_accepted(client: Any, policy: Any) -> None:
    response = await client.post(TASKS, json=task_body(executionPolicy=policy))
    assert response.status_code == 201, response.text


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    *[(f"old input {old}", bundled(**{old: []}), "schema-invalid")
      for old in model.OLD_BUNDLE_INPUTS],
    ("short commit pin", bundled(commitId="0123abc"), "invalid-request"),
    ("short bundle pin", bundled(bundles=[{"subpath": "a", "target_path": "a",
                                           "commitId": "abc"}]), "invalid-request"),
    ("kind not gitbundle", bundled(kind="tarball"), "invalid-request"),
    ("subpath escapes", bundled(bundles=[{"subpath": "../etc", "target_path": "x"}]),
     "schema-invalid"),
    ("absolute target_path", bundled(bundles=[{"subpath": "x", "target_path": "/abs"}]),
     "schema-invalid"),
    ("prompt with ..", prompt_ref("a/../../b"), "schema-invalid"),
    ("absolute prompt", prompt_ref("/etc/passwd"), "schema-invalid"),
    ("encoded dots", prompt_ref("%2e%2e/secret"), "schema-invalid"),
    ("NUL in prompt path", prompt_ref("a\u0000b"), "invalid-request"),
    ("inject on resume", prompt_ref("p.md", inject="every-turn"), "invalid-request"),
    ("skill with a manifest", bundled(requiredSkills=[{"name": "s", "manifest": "inline"}]),
     "invalid-request"),
    ("unknown tool", env_policy("artifact-registry", "push", ["k"], "K"),
     "invalid-request"),
    ("unknown projection kind", {"executionPolicy": tool(
        "git-host", "pull-request", ["k"], {"kind": "file", "path": "/x"})},
     "invalid-request"),
    ("caller image string", {"backendImageRef": {"image": "evil:latest"}},
     "invalid-request"),
    ("unknown session field", {"sessionRef": {"sessionId": "s", "conversationId": "c",
                                              "history": []}}, "invalid-request"),
    ("workbench field at top of workspaceRef", {"workspaceRef": {"ticket": "X-1"}},
     "invalid-request"),
]
SSH_FILES = ["id_ed25519", "known_hosts", "config"]
TOOL_REFUSALS = [  # case: tool, purpose, secret keys, projected as env NAME or volume at /path
    ("volume outside /home/svc", "git-host", "pull-request", ["k"], "/etc/x"),
    ("volume with ..", "git-host", "pull-request", ["k"], "/home/svc/../root"),
    ("git-host env name", "git-host", "pull-request", ["GIT_HOST_TOKEN"], "GITHUB_TOKEN"),
    ("ext-ssh with other keys", "ext-ssh", "ssh-passthrough", ["PROVIDER_TOKEN"],
     "EXT_SSH_CLIENT_TOKEN"),
    ("code-host ssh elsewhere", "git-host", "git-host-ssh", SSH_FILES, "/home/svc/keys"),
    ("tool credential env PATH", "git-host", "pull-request", ["GIT_HOST_TOKEN"], "PATH"),
    ("purpose anything", "git-host", "anything", ["GIT_HOST_TOKEN"], "GIT_HOST_TOKEN"),
    ("ext-ssh as a volume", "ext-ssh", "ssh-passthrough", ["id_rsa"], "/home/svc/.ssh"),
    ("ext-ssh env elsewhere", "ext-ssh", "ssh-passthrough", ["EXT_SSH_CLIENT_TOKEN"], "PATH"),
    ("ssh key outside .ssh", "git-host", "pull-request", ["id_rsa"], "/home/svc/keys"),
    ("code-host ssh with other keys", "git-host", "git-host-ssh",
     ["id_rsa", "known_hosts", "config"], "/home/svc/.ssh"),
]
REFUSED += [(case, (volume_policy if where.startswith("/") else env_policy)(
    tool_name, purpose, keys, where), "schema-invalid")
    for case, tool_name, purpose, keys, where in TOOL_REFUSALS]


@pytest.mark.parametrize(("case", "fields", "code"), REFUSED, ids=[c for c, _, _ in REFUSED])
async def test_each_rule_is_enforced_and_nothing_changes(
    client: Any, database_url: str, case: str, fields: dict[str, Any], code: str
) -> None:
    before = await snapshot(database_url)
    response = await client.post(TASKS, json=task_body(**fields))
    assert response.status_code == 400, (case, response.text)
    assert response.json()["error"]["code"] == code, (case, response.text)
    assert await snapshot(database_url) == before


def test_the_profile_table_and_the_m3_alias() -> None:
    assert canonical_profile("M3") == "profile-3"
    assert PROFILE_SECRETS["profile-3"].name == "svc-v01-provider-profile-3"
    assert PROFILE_SECRETS["profile-4"].keys == ("auth.json", "config.toml",
                                                 "model-catalog.json")
    assert all(PROFILE_SECRETS[p].keys[:2] == ("auth.json", "config.toml")
               for p in PROFILE_SECRETS)


def test_ext_ssh_needs_an_endpoint_from_the_caller_or_the_manager() -> None:
    import msgspec

    policy = msgspec.convert(GOOD_POLICIES[1], model.ExecutionPolicy)
    with pytest.raises(DomainError) as refused:
        model.requires_ext_ssh_endpoint(policy, {}, {})
    assert refused.value.code == "schema-invalid"
    model.requires_ext_ssh_endpoint(policy, {"EXT_FRONTEND_URL": "https://t.invalid"}, {})
    model.requires_ext_ssh_endpoint(policy, {}, {"EXT_MAIN_SERVER_HOST": "main.invalid"})
    other = msgspec.convert(GOOD_POLICIES[0], model.ExecutionPolicy)
    model.requires_ext_ssh_endpoint(other, {}, {})  # no ext-ssh, no endpoint needed
