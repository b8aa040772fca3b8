"""An installed service (the image's `pip install .`) holds every package of the tree: each
folder with an `__init__.py` is named in pyproject.toml's package list."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("ledger", "projections", "api", "cli", "runner_assembly", "manifests")


def test_every_package_of_the_tree_is_installed() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for top in TOP for init in (ROOT / top).rglob("__init__.py")}
    assert found, "no package found"
    assert found <= listed, f"packages left out of the install: {sorted(found - listed)}"
