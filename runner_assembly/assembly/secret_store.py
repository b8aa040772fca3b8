"""The file-based secret store: ``<root>/<namespace>/<name>/<key>``.

The manager only asks which keys exist; it never opens a secret file. The runner (a separate
process) copies them into the job's ``BACKEND_HOME``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from runner_assembly.assembly.profiles import ProfileSecret


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
