"""The controlled runtime defaults: a JSON file the operator owns (``SVC_RUNTIME_DEFAULTS``).

It holds what a caller may never pass: the default environment image source, the images
already built for environment identities, the mirror of the main public code host, the
non-secret ``ext-ssh`` endpoints, the tenant policies (which tool and repository secrets each
tenant may reference, by name per use: DESIGN 12), the smoke-check tool list and the prompt
size caps. Without a file every field takes its default below (no tenant may reference any
tool or repository secret).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
from msgspec import UNSET, Meta, UnsetType

from runner_assembly.assembly.fetch_policy import split_host
from runner_assembly.assembly.model import DigestImage, ImageSource, K8sName, Strict

SPEC_SMOKE_TOOLS = ("bun", "node", "npm", "git", "ssh", "gh", "rg", "curl", "kubectl")
"""SPEC 8: what every runner image must have (``gh`` is the code-host CLI)."""
TOOLS_BUNDLE_SMOKE_TOOLS = ("tran", "trans", "apply_patch")
"""SPEC 8: what must be on PATH once a tools bundle is assembled."""
Bytes = Annotated[int, Meta(ge=1, le=16 * 1024 * 1024)]


class BuiltImage(Strict, frozen=True):
    """An image already built for an environment source: reused, never rebuilt."""

    source: ImageSource
    image: DigestImage


class Mirror(Strict, frozen=True):
    """A controlled mirror for the main public code host only."""

    baseUrl: Annotated[str, Meta(pattern=r"^https://[^@\s]+$")]
    host: str = "github.com"


Host = Annotated[str, Meta(min_length=1, max_length=260)]
"""``host`` or ``host:port`` (``[v6]``, ``[v6]:port``), as ``SVC_FETCH_ALLOW_HOSTS`` writes
them."""


class ToolGrant(Strict, frozen=True):
    """The secrets a tenant may use for one tool and purpose."""

    tool: Annotated[str, Meta(min_length=1)]
    purpose: Annotated[str, Meta(min_length=1)]
    secretNames: Annotated[list[K8sName], Meta(min_length=1)]


class RepositoryGrant(Strict, frozen=True):
    """A repository secret a tenant may use, and the hosts it may be sent to."""

    secret: K8sName
    hosts: Annotated[list[Host], Meta(min_length=1)]

    def __post_init__(self) -> None:
        """Every host is ``host[:port]`` (a ``ValueError`` fails the file's decoding)."""
        for host in self.hosts:
            split_host(host)


class TenantPolicy(Strict, frozen=True):
    """Which tool and repository secrets a tenant's runs may reference, by name per use."""

    toolCredentials: list[ToolGrant] = msgspec.field(default_factory=list)
    repositoryCredentials: list[RepositoryGrant] = msgspec.field(default_factory=list)


class RuntimeDefaults(Strict, frozen=True):
    """Everything the operator controls about assembly (see the module docstring)."""

    imageSource: ImageSource | UnsetType = UNSET
    images: list[BuiltImage] = msgspec.field(default_factory=list)
    mirror: Mirror | UnsetType = UNSET
    extSshEndpoints: dict[str, str] = msgspec.field(default_factory=dict)
    tenantPolicies: dict[str, TenantPolicy] = msgspec.field(default_factory=dict)
    smokeTools: list[str] | UnsetType = UNSET
    promptMaxBytes: Bytes = 64 * 1024
    promptsMaxTotalBytes: Bytes = 256 * 1024


class DefaultsError(Exception):
    """The runtime defaults file is unreadable or invalid (an operator error at startup)."""


def load_defaults(path: str | None) -> RuntimeDefaults:
    """The defaults from ``path``, or the built-in ones when no path is configured."""
    if not path:
        return RuntimeDefaults()
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=RuntimeDefaults)
    except OSError as error:
        raise DefaultsError(f"cannot read SVC_RUNTIME_DEFAULTS {path}: {error.strerror}") from None
    except msgspec.ValidationError as error:
        raise DefaultsError(f"invalid SVC_RUNTIME_DEFAULTS {path}: {error}") from None
    except msgspec.DecodeError:
        raise DefaultsError(f"SVC_RUNTIME_DEFAULTS {path} is not JSON") from None
