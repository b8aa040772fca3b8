"""Compile the bytecode of every module the ``svc`` program loads (``make setup`` runs this;
so does the ``cli`` benchmark before it measures).

``pip install`` compiles a package's modules, and Python caches what it imports; with
``pip install --no-compile`` (``make setup``'s, for a shorter install) under
``PYTHONDONTWRITEBYTECODE=1`` neither happens, and every ``svc`` command compiled its
modules from source again: about half of a read command's start-up.

    .venv/bin/python scripts/compile_cli.py
"""

from __future__ import annotations

import compileall
import contextlib
import io
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


def loaded_sources() -> list[str]:
    """The source file of every module loaded by building the whole command tree and
    printing its help (the modules a command, its help or its errors use), in this
    project or its environment (Python's own are compiled where it was installed)."""
    from cli.main import build

    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        build()(["--help"], exit_on_error=False)
    files = (getattr(module, "__file__", None) for module in list(sys.modules.values()))
    roots = (str(PROJECT) + "/", sys.prefix + "/")
    return sorted({path for path in files
                   if path and path.endswith(".py") and path.startswith(roots)})


def main() -> int:
    """Compile those whose bytecode is missing or stale."""
    sources = loaded_sources()
    ok = all(compileall.compile_file(path, quiet=2) for path in sources)
    print(f"svc: bytecode of {len(sources)} modules up to date")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
