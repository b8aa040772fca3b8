"""Backend profiles and their provider secrets (SPEC 2.7)."""

from __future__ import annotations

from dataclasses import dataclass

PROFILES = ("profile-1", "profile-2", "profile-3", "profile-4")
ALIASES = {"M3": "profile-3"}


@dataclass(frozen=True)
class ProfileSecret:
    """The secret reference of a profile: name and keys, never values."""

    name: str
    keys: tuple[str, ...]


PROFILE_SECRETS = {
    "profile-1": ProfileSecret("svc-v01-provider-profile-1", ("auth.json", "config.toml")),
    "profile-2": ProfileSecret("svc-v01-provider-profile-2", ("auth.json", "config.toml")),
    "profile-3": ProfileSecret("svc-v01-provider-profile-3", ("auth.json", "config.toml")),
    "profile-4": ProfileSecret("svc-v01-provider-profile-4",
                               ("auth.json", "config.toml", "model-catalog.json")),
}


def canonical_profile(value: str) -> str:
    """``M3`` → ``profile-3``; other values unchanged."""
    return ALIASES.get(value, value)
