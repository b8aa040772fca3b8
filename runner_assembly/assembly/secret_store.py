"""Where the manager learns whether referenced secrets exist (never their values).

Local driver: the file-based secret store ``<root>/<namespace>/<name>/<key>``; the manager
only asks which keys exist, it never opens a secret file. The runner (a separate process)
copies them into the job's ``BACKEND_HOME``. Kubernetes driver: the manager does not look
(it may not read secrets at all); a missing secret or key surfaces in the job, as the runner's
``secret-unavailable`` report or kubelet's refusal (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from runner_assembly.assembly.profiles import ProfileSecret


class SecretStore(Protocol):
    """Answers which keys of a referenced secret are missing."""

    def missing(self, namespace: str, name: str, keys: Iterable[str]) -> list[str]:
        """Keys of the secret that do not exist (existence only: no value is read)."""
        ...

    def missing_keys(self, namespace: str, secret: ProfileSecret) -> list[str]:
        """Keys of a profile secret that do not exist."""
        ...


class CheckedInTheJob:
    """The Kubernetes driver's store: nothing is missing up front; the job tells."""

    def missing(self, namespace: str, name: str, keys: Iterable[str]) -> list[str]:
        """Nothing: the runner or kubelet refuses a missing secret or key in the job."""
        return []

    def missing_keys(self, namespace: str, secret: ProfileSecret) -> list[str]:
        """Nothing (see :meth:`missing`)."""
        return []


class FileSecretStore:
    """Secret references resolved against a directory tree."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def secret_dir(self, namespace: str, name: str) -> Path:
        """The directory holding one secret's keys."""
        return self.root / namespace / name

    def missing(self, namespace: str, name: str, keys: Iterable[str]) -> list[str]:
        """Keys of the secret that do not exist (existence only: no value is read)."""
        folder = self.secret_dir(namespace, name)
        return [key for key in keys if not (folder / key).is_file()]

    def missing_keys(self, namespace: str, secret: ProfileSecret) -> list[str]:
        """Keys of a profile secret that do not exist."""
        return self.missing(namespace, secret.name, secret.keys)
