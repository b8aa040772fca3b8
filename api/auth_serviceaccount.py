"""Kubernetes ServiceAccount tokens (DESIGN 12): the API server reviews the token
(``TokenReview``, audience ``svc``); a reviewed ``system:serviceaccount:<ns>:<name>`` that
``SVC_AUTH_SERVICEACCOUNTS`` maps is the principal ``sa:<ns>/<name>`` with the mapped tenant,
roles and projects.

Accepted only when the review says ``authenticated`` with ``svc`` among its audiences. A
review that fails (the API unreachable, refusing or timing out) refuses the request with 503
rather than guessing. Accepted tokens are remembered by their sha256 for
:data:`CACHE_S` at most, never past their own ``exp``, so each request costs no API call;
refusals are not remembered. The token is sent to the API server only: it is never logged,
and API answers (which echo it) never leave this module.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from api.auth_jwt import CredentialUncheckable, is_jwt, unverified_claims
from api.auth_principal import Grant, Principal
from runner_assembly.drivers.k8s import REQUEST_TIMEOUT, REST_LOGGER, api_client, drop_bodies

if TYPE_CHECKING:
    from api.settings import ServiceSettings

AUDIENCE = "svc"
USER_PREFIX = "system:serviceaccount:"
CACHE_S = 30.0
CACHE_ENTRIES = 1024
UNCHECKABLE = "the Kubernetes API could not review the credential"
log = logging.getLogger("svc.auth")


def account_of(username: str) -> str | None:
    """``<ns>/<name>`` of a ServiceAccount's username, None for any other user."""
    if not username.startswith(USER_PREFIX):
        return None
    namespace, _, name = username.removeprefix(USER_PREFIX).partition(":")
    return f"{namespace}/{name}" if namespace and name and ":" not in name else None


class ReviewCache:
    """Accepted tokens by sha256, each until its deadline; the oldest go first when full."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.entries: OrderedDict[str, tuple[float, Principal]] = OrderedDict()

    def get(self, digest: str) -> Principal | None:
        """The principal remembered for ``digest``, unless its deadline passed."""
        found = self.entries.get(digest)
        if found is None:
            return None
        if found[0] <= self.clock():
            del self.entries[digest]
            return None
        return found[1]

    def put(self, digest: str, principal: Principal, expires_at: object) -> None:
        """Remember for :data:`CACHE_S`, or until ``exp`` (unix seconds) when sooner."""
        lifetime = CACHE_S
        if isinstance(expires_at, int | float):
            lifetime = min(lifetime, float(expires_at) - time.time())
        if lifetime <= 0:
            return
        self.entries[digest] = (self.clock() + lifetime, principal)
        self.entries.move_to_end(digest)
        while len(self.entries) > CACHE_ENTRIES:
            self.entries.popitem(last=False)


class ServiceAccountSource:
    """Checks ServiceAccount tokens with the API server's TokenReview."""

    kind = "serviceaccount"

    def __init__(self, api: k8s.ApiClient, accounts: Mapping[str, Grant]) -> None:
        api.configuration.debug = False  # http.client would print the token
        REST_LOGGER.addFilter(drop_bodies)
        self.reviews = k8s.AuthenticationV1Api(api)
        self.accounts = dict(accounts)
        self.cache = ReviewCache()

    @classmethod
    def from_settings(cls, service: ServiceSettings) -> ServiceAccountSource:
        """The source ``SVC_AUTH_SERVICEACCOUNTS`` maps, on the driver's cluster client
        (``SVC_KUBERNETES_API``, else in-cluster config, else kubeconfig)."""
        return cls(api_client(service.kubernetes_api), service.auth_serviceaccounts)

    def claims(self, credential: str) -> bool:
        """Any JWT (an OIDC token of the configured issuer is claimed before)."""
        return is_jwt(credential)

    async def authenticate(self, credential: str) -> Principal | None:
        """The mapped principal of a reviewed token, or None."""
        digest = hashlib.sha256(credential.encode()).hexdigest()
        cached = self.cache.get(digest)
        if cached is not None:
            return cached
        status = await asyncio.to_thread(self._review, credential)
        principal = self._principal(status)
        if principal is not None:
            claims = unverified_claims(credential) or {}  # reviewed: its claims are genuine
            self.cache.put(digest, principal, claims.get("exp"))
        return principal

    def _review(self, credential: str) -> dict[str, Any]:
        """The review's ``status`` (blocking): :class:`CredentialUncheckable` when the API
        cannot give one."""
        body = k8s.V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                                 spec=k8s.V1TokenReviewSpec(token=credential,
                                                            audiences=[AUDIENCE]))
        try:
            answer: Any = self.reviews.create_token_review(
                body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
            review = json.loads(answer.data)
        except ApiException as error:
            log.warning("TokenReview failed (HTTP %s)", error.status)
            raise CredentialUncheckable(UNCHECKABLE) from None
        except (urllib3.exceptions.HTTPError, OSError, ValueError):
            log.warning("TokenReview failed: the Kubernetes API did not answer")
            raise CredentialUncheckable(UNCHECKABLE) from None
        status = review.get("status") if isinstance(review, dict) else None
        return status if isinstance(status, dict) else {}

    def _principal(self, status: dict[str, Any]) -> Principal | None:
        """The principal of a review's status: authenticated, for ``svc``, mapped."""
        audiences = status.get("audiences")
        if status.get("authenticated") is not True or not isinstance(audiences, list) \
                or AUDIENCE not in audiences:
            return None
        user = status.get("user")
        username = user.get("username") if isinstance(user, dict) else None
        account = account_of(username) if isinstance(username, str) else None
        grant = self.accounts.get(account) if account else None
        if account is None or grant is None:
            log.info("a reviewed credential was refused: %s is not a mapped ServiceAccount",
                     str(username)[:200])
            return None
        return Principal(id=f"sa:{account}", tenant=grant.tenant, projects=grant.projects,
                         roles=frozenset(grant.roles), kind="serviceaccount")
