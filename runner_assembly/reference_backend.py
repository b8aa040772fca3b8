"""The reference backend: a small, honest stand-in for a coding agent, for tests and the
quick start. Not an agent: it reads the prompt on standard input and writes output.

Prompt lines it obeys (anything else is echoed):

    exit: N          exit with status N
    sleep: S         sleep S seconds first
    blocker: KIND    report an assembly blocker (e.g. required-skill-unavailable)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main() -> int:
    """Read the prompt, act on its directives, print what it did."""
    prompt = sys.stdin.read()
    directives = {}
    for line in prompt.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("exit", "sleep", "blocker"):
            directives[key.strip()] = value.strip()
    home = Path(os.environ.get("BACKEND_HOME", "."))
    print(f"reference backend: profile={os.environ.get('SVC_BACKEND_PROFILE', '-')} "
          f"prompt={len(prompt.encode())} bytes home-files={len(list(home.iterdir()))}")
    for line in prompt.splitlines():
        print(f"> {line}")
    if "sleep" in directives:
        time.sleep(float(directives["sleep"]))
    if "blocker" in directives:
        (home / ".svc-blocker").write_text(directives["blocker"])
        return 3
    return int(directives.get("exit", "0"))


if __name__ == "__main__":
    sys.exit(main())
