"""Checks on a dispatch's ``transientEnv`` (SPEC 2.10, 5.1, 5.2 rule 6).

It carries only short-lived or owner-scoped context and non-sensitive addresses: never a
provider credential, code-host token, terminal client token or SSH key, and never a name
the runner sets itself. A run asking for ``ext-ssh`` needs an endpoint from here or from
the controlled defaults.
"""

from __future__ import annotations

import msgspec

from runner_assembly.assembly.defaults import RuntimeDefaults
from runner_assembly.assembly.model import (
    ExecutionPolicy,
    check_names,
    requires_ext_ssh_endpoint,
)


def check_transient_env(env: dict[str, str], contract: dict[str, object],
                        defaults: RuntimeDefaults) -> None:
    """``schema-invalid`` for a forbidden name or an ``ext-ssh`` run without an endpoint.

    Messages name the variable, never its value.
    """
    check_names(env)
    policy = msgspec.convert(contract.get("executionPolicy") or {}, ExecutionPolicy)
    requires_ext_ssh_endpoint(policy, env, defaults.extSshEndpoints)
