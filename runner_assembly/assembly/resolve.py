"""Resolution in the manager (SPEC 9 assembly order, first two steps).

Resolves the four elements (image, profile, session, resource bundle) and every secret
reference the run may use -- provider, repository and tool -- by existence and keys only:
no secret value is read here. The result, :class:`Assembly`, holds references, names and
hashes only, so it may be stored, shown in a dry run and rendered into a runner job.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ledger.states import FailureKind
from runner_assembly.assembly import fetch_policy, grants
from runner_assembly.assembly.defaults import RuntimeDefaults
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.model import EXT_SSH_ENDPOINTS, ImageSource, SecretScope
from runner_assembly.assembly.names import session_pvc_name
from runner_assembly.assembly.profiles import PROFILE_SECRETS
from runner_assembly.assembly.secret_store import SecretStore
from runner_assembly.contract.jobfile import FetchAllow
from runner_assembly.contract.plan import (
    ImageResolution,
    NamesSummary,
    RepositoryFetch,
    SecretUse,
    SessionVolume,
)

SESSION_VOLUME_SIZE = "1Gi"


def _scope(contract: dict[str, Any]) -> SecretScope:
    return msgspec.convert(
        (contract.get("executionPolicy") or {}).get("secretScope") or {}, SecretScope)


def _namespace(value: str | msgspec.UnsetType, default: str) -> str:
    return value if isinstance(value, str) else default


class Assembly(msgspec.Struct, kw_only=True, rename="camel"):
    """Everything a runner job executes with, by reference: safe to store and to show."""

    backend_profile: str
    image: ImageResolution
    session: SessionVolume | None
    resource_bundle: dict[str, Any] | None
    branch: str | None
    fetches: list[RepositoryFetch]
    secrets: list[SecretUse]
    transient_env: NamesSummary
    endpoint_defaults: list[str]
    provider_id: str | None = None
    """The run policy's ``providerId`` (SPEC 2.7), carried as sent."""
    values_printed: bool = False


def environment_id(source: ImageSource) -> str:
    """The environment identity of an image source: a hash of its fields."""
    canonical = msgspec.json.encode(msgspec.to_builtins(source), order="sorted")
    return "env-" + hashlib.sha256(canonical).hexdigest()[:16]


def names_summary(env: Mapping[str, str]) -> NamesSummary:
    """Names, count and a sha256 over the sorted entries; never the values themselves."""
    if not env:
        return NamesSummary(names=[], count=0, sha256=None)
    canonical = msgspec.json.encode(dict(sorted(env.items())))
    return NamesSummary(names=sorted(env), count=len(env),
                        sha256=hashlib.sha256(canonical).hexdigest())


def mirror_fetch(repo_url: str, defaults: RuntimeDefaults) -> RepositoryFetch:
    """The fetch URL: the controlled mirror for the main public code host, else unchanged."""
    mirror = defaults.mirror
    if not isinstance(mirror, msgspec.UnsetType):
        prefix = f"https://{mirror.host}/"
        if repo_url.startswith(prefix):
            path = repo_url.removeprefix(prefix).removesuffix(".git")
            return RepositoryFetch(repo_url=repo_url,
                                   fetch_repo_url=f"{mirror.baseUrl.rstrip('/')}/{path}.git",
                                   mirror_used=True, mirror_base_url=mirror.baseUrl)
    return RepositoryFetch(repo_url=repo_url, fetch_repo_url=repo_url, mirror_used=False,
                           mirror_base_url=None)


@dataclass(kw_only=True, eq=False)
class Resolver:
    """Resolves a task's contract into an :class:`Assembly` (no secret value is read)."""

    namespace: str
    driver: str
    secrets: SecretStore
    defaults: RuntimeDefaults
    storage_class: str
    rollout_subdir: str
    fetch_allow: FetchAllow = field(default_factory=FetchAllow)
    """The operator's fetch allow-list (DESIGN 13; default: none)."""

    def resolve(self, contract: dict[str, Any], backend_profile: str,
                transient_env: Mapping[str, str]) -> Assembly:
        """The assembly of one run, or :class:`AssemblyFailure` naming the failed element."""
        scope = _scope(contract)
        bundle = contract.get("resourceBundleRef")
        self.check_grants(contract)
        endpoint_defaults = self._endpoint_defaults(scope, transient_env)
        secrets = [self._profile_secret(backend_profile, scope)]
        secrets += self._tool_secrets(scope)
        repository = self._repository_secret(str(contract.get("tenantId", "")), bundle)
        if repository is not None:
            secrets.append(self._checked(repository))
        workspace = contract.get("workspaceRef") or {}
        return Assembly(
            backend_profile=backend_profile, image=self._image(),
            session=self.session_volume(contract.get("sessionRef")), resource_bundle=bundle,
            branch=workspace.get("branch"),
            fetches=self._fetches(bundle), secrets=secrets,
            transient_env=names_summary(transient_env), endpoint_defaults=endpoint_defaults,
            provider_id=contract.get("providerId"),
        )

    def _checked(self, use: SecretUse) -> SecretUse:
        if use.namespace != self.namespace:
            raise AssemblyFailure(FailureKind.TENANT_POLICY_DENIED,
                                  f"secret {use.name} is outside namespace {self.namespace}")
        missing = self.secrets.missing(use.namespace, use.name, use.keys)
        if missing:
            raise AssemblyFailure(FailureKind.SECRET_UNAVAILABLE,
                                  f"secret {use.name} lacks keys: {', '.join(missing)}")
        return use

    def _profile_secret(self, profile: str, scope: SecretScope) -> SecretUse:
        secret = PROFILE_SECRETS[profile]
        for ref in scope.providerCredentials:
            if ref.name != secret.name:
                raise AssemblyFailure(FailureKind.TENANT_POLICY_DENIED,
                                      f"provider credential {ref.name} is not the secret of "
                                      f"{profile}; no other profile's secret is used")
        return self._checked(SecretUse(role="provider", projection="backend-home",
                                       namespace=self.namespace, name=secret.name,
                                       keys=list(secret.keys)))

    def check_grants(self, contract: dict[str, Any]) -> None:
        """``tenant-policy-denied`` for a tool or repository secret the contract's tenant is
        not granted for its use, or a repository credential that would be sent to a host or
        over a transport its grant does not allow (:mod:`grants`); no secret is looked at."""
        tenant = str(contract.get("tenantId", ""))
        for credential in _scope(contract).toolCredentials:
            secret = credential.secretRef
            grants.check_tool(self.defaults, tenant, credential.tool, credential.purpose,
                              secret.name, _namespace(secret.namespace, self.namespace),
                              self.namespace)
        bundle = contract.get("resourceBundleRef") or {}
        ref = bundle.get("credentialRef")
        if ref:
            grants.check_repository(
                self.defaults, tenant, ref["name"], ref.get("namespace", self.namespace),
                self.namespace, mirror_fetch(bundle["repoUrl"], self.defaults).fetch_repo_url)

    def _repository_secret(self, tenant: str,
                           bundle: dict[str, Any] | None) -> SecretUse | None:
        """The bundle's repository credential with the hosts it may be sent to."""
        ref = (bundle or {}).get("credentialRef")
        if not ref:
            return None
        return SecretUse(role="repository", projection="fetch-only",
                         namespace=ref.get("namespace", self.namespace), name=ref["name"],
                         keys=ref["keys"],
                         hosts=grants.granted_hosts(self.defaults, tenant, ref["name"]))

    def _tool_secrets(self, scope: SecretScope) -> list[SecretUse]:
        uses = []
        for credential in scope.toolCredentials:
            projection = credential.projection
            env_name = getattr(projection, "envName", None)
            uses.append(self._checked(SecretUse(
                role="tool", tool=credential.tool, purpose=credential.purpose,
                name=credential.secretRef.name, keys=list(credential.secretRef.keys),
                namespace=_namespace(credential.secretRef.namespace, self.namespace),
                projection="env" if env_name else "volume", env_name=env_name,
                mount_path=getattr(projection, "mountPath", None))))
        return uses

    def _endpoint_defaults(self, scope: SecretScope,
                           transient_env: Mapping[str, str]) -> list[str]:
        """SPEC 5.2 rule 6: names of controlled endpoint defaults added for ``ext-ssh``."""
        if not any(c.tool == "ext-ssh" for c in scope.toolCredentials):
            return []
        if any(transient_env.get(name) for name in EXT_SSH_ENDPOINTS):
            return []
        added = [n for n in EXT_SSH_ENDPOINTS if self.defaults.extSshEndpoints.get(n)]
        if not added:
            raise AssemblyFailure(FailureKind.SCHEMA_INVALID, "ext-ssh needs one of "
                                  + ", ".join(EXT_SSH_ENDPOINTS) + " and none is configured")
        return added

    def _image(self) -> ImageResolution:
        """Digest-pinned image of the environment source, reused; never built here."""
        source = self.defaults.imageSource
        if isinstance(source, msgspec.UnsetType):
            if self.driver == "local":
                return ImageResolution(source=None, environment_id=None, image=None,
                                       status="not-applicable")
            raise AssemblyFailure(FailureKind.BUILD_REQUIRED,
                                  "no environment image source is configured")
        identity = environment_id(source)
        built = next((b.image for b in self.defaults.images
                      if environment_id(b.source) == identity), None)
        if built is None and self.driver != "local":
            raise AssemblyFailure(FailureKind.BUILD_REQUIRED, f"environment {identity} has no "
                                  "built image and no controlled build was started")
        return ImageResolution(source=msgspec.to_builtins(source), environment_id=identity,
                               image=built, status="reused" if built else "not-applicable")

    def session_volume(self, ref: dict[str, Any] | None) -> SessionVolume | None:
        """The volume of a ``sessionRef`` (None without one)."""
        if not ref:
            return None
        return SessionVolume(
            session_id=ref["sessionId"], conversation_id=ref["conversationId"],
            thread_id=ref.get("threadId"),
            pvc_name=session_pvc_name(ref['sessionId']),
            namespace=self.namespace, rollout_subdir=self.rollout_subdir,
            size=SESSION_VOLUME_SIZE, storage_class=self.storage_class)

    def _fetches(self, bundle: dict[str, Any] | None) -> list[RepositoryFetch]:
        if not bundle:
            return []
        urls = [bundle["repoUrl"]] + [b["repoUrl"] for b in bundle.get("bundles", [])
                                      if b.get("repoUrl")]
        fetches = [mirror_fetch(url, self.defaults) for url in dict.fromkeys(urls)]
        for fetch in fetches:  # what its host resolves to is checked off the event loop
            fetch_policy.check_written(fetch.fetch_repo_url, self.fetch_allow)
        return fetches
