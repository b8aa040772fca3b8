"""Tenant policies for tests: grant exactly the secrets a test's contract names (DESIGN 12)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from runner_assembly.assembly.defaults import RepositoryGrant, TenantPolicy, ToolGrant


def tool_grants(credentials: Iterable[Mapping[str, Any]]) -> list[ToolGrant]:
    """One grant per ``tool/purpose`` of the given tool credential items (as a contract
    writes them), naming their secrets."""
    names: dict[tuple[str, str], list[str]] = {}
    for item in credentials:
        names.setdefault((item["tool"], item["purpose"]), []).append(item["secretRef"]["name"])
    return [ToolGrant(tool=tool, purpose=purpose, secretNames=sorted(set(secrets)))
            for (tool, purpose), secrets in names.items()]


def granting(*credentials: Mapping[str, Any], repositories: Mapping[str, list[str]] | None
             = None, tenant: str = "acme") -> dict[str, TenantPolicy]:
    """``tenantPolicies`` granting ``tenant`` the tool credentials and the repository
    secrets (name → hosts) given."""
    return {tenant: TenantPolicy(
        toolCredentials=tool_grants(credentials),
        repositoryCredentials=[RepositoryGrant(secret=name, hosts=list(hosts))
                               for name, hosts in (repositories or {}).items()])}


def defaults_file(path: Path, policies: Mapping[str, TenantPolicy],
                  **defaults: Any) -> Path:
    """A runtime defaults file (``SVC_RUNTIME_DEFAULTS``) holding ``policies``."""
    path.write_text(json.dumps({**defaults, "tenantPolicies": msgspec.to_builtins(policies)}))
    return path


def merged(*policies: Mapping[str, TenantPolicy]) -> dict[str, TenantPolicy]:
    """Several ``tenantPolicies`` as one: each tenant's grants put together."""
    result: dict[str, TenantPolicy] = {}
    for each in policies:
        for tenant, policy in each.items():
            known = result.get(tenant, TenantPolicy())
            result[tenant] = TenantPolicy(
                toolCredentials=[*known.toolCredentials, *policy.toolCredentials],
                repositoryCredentials=[*known.repositoryCredentials,
                                       *policy.repositoryCredentials])
    return result


def with_grants(settings: Any, *policies: Mapping[str, TenantPolicy]) -> Any:
    """Runner settings whose runtime defaults also hold ``policies``."""
    import dataclasses

    defaults = settings.defaults
    return dataclasses.replace(settings, defaults=msgspec.structs.replace(
        defaults, tenantPolicies=merged(defaults.tenantPolicies, *policies)))
