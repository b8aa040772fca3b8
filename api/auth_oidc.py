"""OIDC JWTs (DESIGN 12): a token of the configured issuer, verified with PyJWT against the
issuer's key set, whose claim (``SVC_AUTH_OIDC_CLAIM``) lists ``tenant:role`` pairs.

Verified: the signature (RS256 or ES256 only; ``none`` and HMAC are refused before any key is
looked up), ``iss``, ``aud``, ``exp`` (required), ``nbf`` and ``iat`` with
:data:`LEEWAY_S`. The key set (``SVC_AUTH_OIDC_JWKS_URL``, else the ``jwks_uri`` of the
issuer's ``/.well-known/openid-configuration``) is fetched by PyJWT's ``PyJWKClient``,
cached, and fetched again once for an unknown ``kid`` (at most every
:data:`REFRESH_COOLDOWN_S`). One tenant per credential: every pair of the claim names the
same tenant, else the token is refused. The principal is ``oidc:<sub>``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import urllib.request
from typing import TYPE_CHECKING, Any

import jwt

from api.auth_jwt import CredentialUncheckable, is_jwt, unverified_claims
from api.auth_principal import ROLES, Principal

if TYPE_CHECKING:
    from api.settings import ServiceSettings

ALGORITHMS = ("RS256", "ES256")
LEEWAY_S = 30
"""Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
FETCH_TIMEOUT_S = 5.0
JWKS_LIFESPAN_S = 300.0
"""How long a fetched key set is used before it is fetched again."""
REFRESH_COOLDOWN_S = 30.0
"""An unknown ``kid`` fetches the key set again at most this often (no fetch per request)."""
DISCOVERY = "/.well-known/openid-configuration"
log = logging.getLogger("svc.auth")


def roles_of(value: object) -> tuple[str, frozenset[str]] | None:
    """``(tenant, roles)`` of a claim listing ``tenant:role`` pairs, None when it is not a
    non-empty list of such pairs with known roles, all of one tenant."""
    if not isinstance(value, list) or not value:
        return None
    tenants, roles = set(), set()
    for pair in value:
        tenant, _, role = pair.rpartition(":") if isinstance(pair, str) else ("", "", "")
        if not tenant or role not in ROLES:
            return None
        tenants.add(tenant)
        roles.add(role)
    return (tenants.pop(), frozenset(roles)) if len(tenants) == 1 else None


def discovered_jwks_url(issuer: str) -> str:
    """The ``jwks_uri`` of the issuer's discovery document (blocking; no redirects)."""
    opener = urllib.request.build_opener(_NoRedirect())
    with opener.open(issuer.rstrip("/") + DISCOVERY, timeout=FETCH_TIMEOUT_S) as answer:
        document = json.load(answer)
    url = document.get("jwks_uri") if isinstance(document, dict) else None
    if not isinstance(url, str) or not url:
        raise ValueError("the discovery document names no jwks_uri")
    return url


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class OidcSource:
    """Checks JWTs of one issuer."""

    kind = "oidc"

    def __init__(self, issuer: str, audience: str, claim: str, jwks_url: str | None = None,
                 *, cooldown_s: float = REFRESH_COOLDOWN_S) -> None:
        self.issuer = issuer
        self.audience = audience
        self.claim = claim
        self.jwks_url = jwks_url
        self.cooldown_s = cooldown_s
        self._client: jwt.PyJWKClient | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, service: ServiceSettings) -> OidcSource:
        """The source ``SVC_AUTH_OIDC_*`` configure."""
        assert service.auth_oidc_issuer
        return cls(service.auth_oidc_issuer, service.auth_oidc_audience,
                   service.auth_oidc_claim, service.auth_oidc_jwks_url)

    def claims(self, credential: str) -> bool:
        """A JWT whose (unverified) issuer is this source's."""
        if not is_jwt(credential):
            return False
        claims = unverified_claims(credential)
        return claims is not None and claims.get("iss") == self.issuer

    async def authenticate(self, credential: str) -> Principal | None:
        """The principal of a valid token of the issuer, or None."""
        return await asyncio.to_thread(self._authenticate, credential)

    def _authenticate(self, credential: str) -> Principal | None:
        try:
            if jwt.get_unverified_header(credential).get("alg") not in ALGORITHMS:
                return None
            key = self._keys().get_signing_key_from_jwt(credential)
            claims = jwt.decode(
                credential, key, algorithms=list(ALGORITHMS), audience=self.audience,
                issuer=self.issuer, leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.PyJWKClientConnectionError:
            log.warning("the OIDC key set could not be fetched")
            raise CredentialUncheckable("the OIDC key set could not be fetched") from None
        except (jwt.PyJWTError, ValueError, TypeError):
            return None
        granted = roles_of(claims.get(self.claim))
        if granted is None:
            log.info("an OIDC token of %s was refused: its %s claim grants no single tenant",
                     str(claims.get("sub"))[:200], self.claim)
            return None
        tenant, roles = granted
        return Principal(id=f"oidc:{claims['sub']}", tenant=tenant, roles=roles, kind="oidc")

    def _keys(self) -> jwt.PyJWKClient:
        """The key set's client, made on first use (after discovery when no URL is set)."""
        with self._lock:
            if self._client is None:
                url = self.jwks_url
                if url is None:
                    try:
                        url = discovered_jwks_url(self.issuer)
                    except (OSError, ValueError):
                        raise jwt.PyJWKClientConnectionError("no discovery document") from None
                self._client = jwt.PyJWKClient(
                    url, cache_jwk_set=True, lifespan=JWKS_LIFESPAN_S, timeout=FETCH_TIMEOUT_S,
                    cooldown_duration=self.cooldown_s)
            return self._client
