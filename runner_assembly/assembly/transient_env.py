"""Checks on a dispatch's ``transientEnv`` (SPEC 2.10, 5.1, 5.2 rule 6).

It carries only short-lived or owner-scoped context and non-sensitive addresses: never a
provider credential, code-host token, terminal client token or SSH key, and never a name
the runner sets itself. A run asking for ``ext-ssh`` needs an endpoint from here or from
the controlled defaults.
"""

from __future__ import annotations

from typing import Any

import msgspec

from runner_assembly.assembly.defaults import RuntimeDefaults
from runner_assembly.assembly.model import ExecutionPolicy, SchemaInvalid, requires_ext_ssh_endpoint
from runner_assembly.assembly.plan import SESSION_ENV, STATIC_ENV

CREDENTIAL_NAMES = frozenset({"GIT_HOST_TOKEN", "EXT_SSH_CLIENT_TOKEN", "GH_TOKEN",
                              "GITHUB_TOKEN", "SSH_AUTH_SOCK", "OPENAI_API_KEY",
                              "ANTHROPIC_API_KEY"})
RESERVED_NAMES = frozenset({*STATIC_ENV, *SESSION_ENV, "LD_PRELOAD", "LD_LIBRARY_PATH",
                            "PYTHONPATH", "GIT_ASKPASS", "GIT_SSH_COMMAND"})


def check_transient_env(env: dict[str, str], contract: dict[str, Any],
                        defaults: RuntimeDefaults) -> None:
    """``schema-invalid`` for a forbidden name or an ``ext-ssh`` run without an endpoint.

    Messages name the variable, never its value.
    """
    check_names(env)
    policy = msgspec.convert(contract.get("executionPolicy") or {}, ExecutionPolicy)
    requires_ext_ssh_endpoint(policy, env, defaults.extSshEndpoints)


def check_names(env: dict[str, str]) -> None:
    """``schema-invalid`` for a credential name or a name the runner sets itself."""
    for name in sorted(env):
        if name in CREDENTIAL_NAMES or name.endswith(("_PRIVATE_KEY", "_PASSWORD")):
            raise SchemaInvalid(f"transientEnv.{name} is a credential; credentials travel "
                                "only as secret references", field=f"transientEnv.{name}")
        if name in RESERVED_NAMES or name.startswith("SVC_"):
            raise SchemaInvalid(f"transientEnv.{name} is set by the runner itself",
                                field=f"transientEnv.{name}")
