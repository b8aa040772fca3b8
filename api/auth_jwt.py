"""JWT-shaped credentials, shared by the OIDC and ServiceAccount sources: telling one by its
shape, reading its claims unverified (only to route it to the source that verifies it), and
the refusal of a credential that cannot be checked now."""

from __future__ import annotations

import re
from typing import Any

import jwt

from ledger.errors import DomainError
from ledger.states import FailureKind

JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


class CredentialUncheckable(DomainError):
    """The credential could not be checked now (its issuer is unreachable); retry."""

    code: str = FailureKind.INFRA_FAILED


def is_jwt(credential: str) -> bool:
    """True for a credential shaped as a compact JWS: three base64url parts."""
    return JWT_SHAPE.fullmatch(credential) is not None


def unverified_claims(credential: str) -> dict[str, Any] | None:
    """The payload of a JWT-shaped credential, signature NOT checked (to route it only);
    None when it does not decode."""
    try:
        claims = jwt.decode(credential, options={"verify_signature": False})
    except jwt.PyJWTError:
        return None
    return claims if isinstance(claims, dict) else None
