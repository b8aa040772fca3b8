"""The deployment manifest of SPEC 2.12 as msgspec Structs with its constraints.

Patterns end with ``\\Z``: Python's ``$`` also matches before a final newline, so ``"v1\\n"``
would pass. The published JSON Schema writes the same anchor as ``$`` (ECMA-262: the end of
input); see :func:`manifests.schema.generate`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, UnsetType

ServiceId = Literal[
    "lab-cloud-api", "lab-cloud-web", "lab-agent-mgr", "lab-agent-worker", "lab-gateway",
    "lab-gateway-simu", "lab-box-simu", "lab-patch-panel", "lab-router", "lab-tunnel-client",
    "lab-edge-proxy", "lab-cli", "lab-agent-skills",
]
ProfileName = Literal["dev", "prod"]
DnsLabel = Annotated[str, Meta(min_length=1, max_length=63,
                               pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")]
NonEmpty = Annotated[str, Meta(min_length=1)]


class Strict(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """No additional properties at any level."""


class Profile(Strict, frozen=True):
    """A deployment profile."""

    name: ProfileName
    enabled: bool
    namespace: str | UnsetType = UNSET
    endpoint: str | UnsetType = UNSET
    notes: str | UnsetType = UNSET


class Profiles(Strict, frozen=True):
    """``dev`` is required, ``prod`` optional; no other key."""

    dev: Profile
    prod: Profile | UnsetType = UNSET


class Service(Strict, frozen=True):
    """One deployed component."""

    serviceId: ServiceId
    image: NonEmpty
    namespace: NonEmpty
    healthPath: Annotated[str, Meta(pattern=r"^/")]
    profile: ProfileName
    replicas: Annotated[int, Meta(ge=0)] | UnsetType = UNSET
    env: dict[str, str] | UnsetType = UNSET


class DeploymentManifest(Strict, frozen=True):
    """Which service components are deployed in which profile."""

    manifestVersion: Annotated[str, Meta(pattern=r"^v[0-9]+\Z")]
    environment: Literal["dev"]
    commitId: Annotated[str, Meta(pattern=r"^[a-f0-9]{7,40}\Z")]
    profiles: Profiles
    services: Annotated[list[Service], Meta(min_length=1)]
    namespace: DnsLabel | UnsetType = UNSET
    endpoint: str | UnsetType = UNSET
    createdAt: Annotated[datetime, Meta(tz=True)] | UnsetType = UNSET
