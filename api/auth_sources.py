"""Credential sources (DESIGN 12): where a bearer credential is checked, chosen by its shape.

In order: an API key (``svck_…``, or the operator's ``SVC_ADMIN_KEY_SHA256`` key); an OIDC
JWT (three dot-separated base64url parts whose unverified ``iss`` is
``SVC_AUTH_OIDC_ISSUER``); a Kubernetes ServiceAccount token (any other JWT, when
``SVC_AUTH_SERVICEACCOUNTS`` is set). The unverified ``iss`` only routes the credential to
the source that verifies it; it grants nothing. A credential no source claims is a runner
token on a route that takes one, else refused. A source that cannot check a credential now
(its API or key set is unreachable) refuses the request with 503: an outage never grants.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from api.auth_keys import KeyService
from api.auth_principal import Principal, is_api_key, key_sha256

if TYPE_CHECKING:
    from api.settings import ServiceSettings

class CredentialSource(Protocol):
    """One kind of credential: which credentials it claims (by shape) and who they are."""

    kind: str

    def claims(self, credential: str) -> bool:
        """True when the credential is of this source's kind (no check of its validity)."""
        ...

    async def authenticate(self, credential: str) -> Principal | None:
        """The principal of a valid credential, None for an invalid one;
        :class:`api.auth_jwt.CredentialUncheckable` when it cannot be checked now."""
        ...


class KeySource:
    """API keys: ``svck_…`` keys of the ledger and the operator's static admin key."""

    kind = "key"

    def __init__(self, keys: KeyService) -> None:
        self.keys = keys

    def claims(self, credential: str) -> bool:
        """An ``svck_`` key, or the operator's admin key (by its sha256)."""
        return is_api_key(credential) or self.keys.is_static(key_sha256(credential))

    async def authenticate(self, credential: str) -> Principal | None:
        """The key's principal, unless unknown, revoked or expired."""
        return await self.keys.authenticate(credential)


class CredentialSources:
    """The configured sources, tried in order; the first that claims a credential decides."""

    def __init__(self, sources: Sequence[CredentialSource]) -> None:
        self.sources = tuple(sources)

    def pick(self, credential: str) -> CredentialSource | None:
        """The source that checks ``credential``, or None (e.g. a runner token)."""
        return next((source for source in self.sources if source.claims(credential)), None)


def configured_sources(service: ServiceSettings, keys: KeyService) -> CredentialSources:
    """API keys always; OIDC and ServiceAccount tokens when their settings are set."""
    sources: list[CredentialSource] = [KeySource(keys)]
    if service.auth_oidc_issuer:
        from api.auth_oidc import OidcSource

        sources.append(OidcSource.from_settings(service))
    if service.auth_serviceaccounts:
        from api.auth_serviceaccount import ServiceAccountSource

        sources.append(ServiceAccountSource.from_settings(service))
    return CredentialSources(sources)
