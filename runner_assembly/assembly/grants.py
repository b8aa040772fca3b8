"""Secrets belong to tenants (DESIGN 12): which secret a run may reference, and where a
repository credential may be sent.

A tool secret is usable only when the tenant's policy (runtime defaults, ``tenantPolicies``)
names it for that ``tool/purpose``; a repository secret only when the policy names it, and it
is sent only over ``https`` or ``ssh`` to a host the grant lists. No policy grants nothing.
The service's own secrets (the database secret, per-job secrets, the provider profiles'
secrets, any name with the ``svc-`` prefix) are refused even when a policy names them.
Every refusal is ``tenant-policy-denied``; messages name the tenant, the use and the secret's
name, never a value.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ledger.states import FailureKind
from runner_assembly.assembly import fetch_policy
from runner_assembly.assembly.defaults import RuntimeDefaults, TenantPolicy
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.names import PREFIX
from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.contract.jobfile import FetchAllow

SERVICE_PREFIX = "svc-"
"""Every secret of the service itself is named with this prefix (the manifests' database
secret ``svc-database``, the per-job secrets, the provider profiles' secrets)."""
DATABASE_SECRET = "svc-database"
"""The database secret of the manifests (``manifests/k8s/base/deployment.yaml``)."""
PER_JOB_PREFIX = f"{PREFIX}-job-"
"""The prefix of every runner job's per-job secret (:func:`names.per_job_secret_name`)."""
CREDENTIAL_SCHEMES = ("https", "ssh")
"""The only transports a repository credential is sent over."""


def denied(message: str) -> AssemblyFailure:
    """A ``tenant-policy-denied`` failure."""
    return AssemblyFailure(FailureKind.TENANT_POLICY_DENIED, message)


def service_secret(name: str) -> str | None:
    """What ``name`` is when it is one of the service's own secrets, else None."""
    if name == DATABASE_SECRET:
        return "the service's database secret"
    if name.startswith(PER_JOB_PREFIX):
        return "a runner job's per-job secret"
    if name in {secret.name for secret in PROFILE_SECRETS.values()}:
        return "a provider profile's secret (used only through the backend profile)"
    if name.startswith(SERVICE_PREFIX):
        return f"one of the service's own secrets (prefix {SERVICE_PREFIX})"
    return None


def _check_own(tenant: str, use: str, name: str, namespace: str, service_namespace: str) -> None:
    if namespace != service_namespace:
        raise denied(f"tenant {tenant!r}: {use} secret {name} is outside namespace "
                     f"{service_namespace}")
    own = service_secret(name)
    if own is not None:
        raise denied(f"tenant {tenant!r}: {use} secret {name} is {own}; it can never be "
                     "referenced")


def check_tool(defaults: RuntimeDefaults, tenant: str, tool: str, purpose: str, name: str,
               namespace: str, service_namespace: str) -> None:
    """Refuse a tool secret the tenant's policy does not grant for ``tool/purpose``."""
    use = f"tool credential {tool}/{purpose}"
    _check_own(tenant, use, name, namespace, service_namespace)
    policy = _policy(defaults, tenant, use, name)
    if not any(g.tool == tool and g.purpose == purpose and name in g.secretNames
               for g in policy.toolCredentials):
        raise denied(f"tenant {tenant!r}: {use} may not use secret {name} (the tenant "
                     "policy does not grant it for this tool and purpose)")


def check_repository(defaults: RuntimeDefaults, tenant: str, name: str, namespace: str,
                     service_namespace: str, fetch_url: str) -> None:
    """Refuse a repository secret the tenant's policy does not grant, or a fetch it would be
    sent with to a host or over a transport the grant does not allow."""
    use = "repository credential"
    _check_own(tenant, use, name, namespace, service_namespace)
    policy = _policy(defaults, tenant, use, name)
    if not any(g.secret == name for g in policy.repositoryCredentials):
        raise denied(f"tenant {tenant!r}: {use} secret {name} is not granted by the tenant "
                     "policy")
    check_sent(fetch_url, granted_hosts(defaults, tenant, name), name)


def granted_hosts(defaults: RuntimeDefaults, tenant: str, name: str) -> list[str]:
    """Every host the tenant's grants of repository secret ``name`` list (none: no grant)."""
    policy = defaults.tenantPolicies.get(tenant)
    found = policy.repositoryCredentials if policy is not None else []
    return [host for grant in found if grant.secret == name for host in grant.hosts]


def check_sent(fetch_url: str, hosts: list[str], name: str) -> None:
    """Refuse sending repository secret ``name`` to ``fetch_url`` unless it goes over
    ``https`` or ``ssh`` to one of ``hosts`` (``host[:port]``)."""
    scheme = scheme_of(fetch_url)
    if scheme not in CREDENTIAL_SCHEMES:
        raise denied(f"repository credential {name} is sent only over "
                     f"{' or '.join(CREDENTIAL_SCHEMES)}, not {scheme or 'this URL'}")
    found = fetch_policy.target(fetch_url)
    if found is None or found.host is None \
            or not fetch_policy.host_allowed(found.host, found.port, FetchAllow(hosts=hosts)):
        where = found.host if found is not None and found.host else "this URL's host"
        raise denied(f"repository credential {name} is not granted for host {where} "
                     f"(granted: {', '.join(hosts)})")


def scheme_of(url: str) -> str | None:
    """The transport of a repository URL (``ssh`` for the scp-like ``git@host:path``)."""
    if fetch_policy.SCP_LIKE.match(url):
        return "ssh"
    try:
        return urlsplit(url).scheme or None
    except ValueError:
        return None


def _policy(defaults: RuntimeDefaults, tenant: str, use: str, name: str) -> TenantPolicy:
    policy = defaults.tenantPolicies.get(tenant)
    if policy is None:
        raise denied(f"tenant {tenant!r} has no tenant policy: {use} secret {name} is not "
                     "granted")
    return policy
