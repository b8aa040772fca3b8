"""Where checkouts may go (SPEC 8): only under the workspace root (``SVC_WORKSPACE_ROOT``),
never onto ``/app``, the secret projection, the runtime home or the session directory.

The manager refuses a root that overlaps a protected path at startup; the runner checks
each checkout again before it clones (a refusal is ``workspace-refused``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure

APP_DIR = Path("/app")
"""The service's own code in its image: never a checkout target."""
Protected = tuple[str, Path]
"""What a protected path is (for the message) and where it is."""


def overlap(path: Path, protected: Iterable[Protected]) -> Protected | None:
    """The first protected path that ``path`` equals, lies in, or contains (a checkout
    there would overwrite it); symlinks are resolved first."""
    here = path.resolve()
    for what, other in protected:
        there = other.resolve()
        if here == there or here.is_relative_to(there) or there.is_relative_to(here):
            return what, other
    return None


def check_root_setting(root: str, protected: Iterable[Protected]) -> Path:
    """``SVC_WORKSPACE_ROOT`` as a path; ``ValueError`` (refused at startup) when it is
    relative or overlaps a protected path."""
    path = Path(root)
    if not path.is_absolute():
        raise ValueError(f"SVC_WORKSPACE_ROOT must be an absolute path, not {root!r}")
    clash = overlap(path, [("/app", APP_DIR), *protected])
    if clash is not None:
        raise ValueError(f"SVC_WORKSPACE_ROOT {root} overlaps {clash[0]} ({clash[1]}): "
                         "checkouts there would overwrite it")
    return path


def check_checkout(workspace: Path, root: Path, protected: Iterable[Protected]) -> None:
    """``workspace-refused`` unless ``workspace`` lies below ``root`` and clear of ``/app``
    and every protected path."""
    if not workspace.resolve().is_relative_to(root.resolve()) \
            or workspace.resolve() == root.resolve():
        raise AssemblyFailure(FailureKind.WORKSPACE_REFUSED,
                              f"the checkout {workspace} is not below the workspace root {root}",
                              details={"workspace": str(workspace), "root": str(root)})
    clash = overlap(workspace, [("/app", APP_DIR), *protected])
    if clash is not None:
        raise AssemblyFailure(FailureKind.WORKSPACE_REFUSED,
                              f"the checkout {workspace} would overwrite {clash[0]} ({clash[1]})",
                              details={"workspace": str(workspace), "protected": clash[0]})
