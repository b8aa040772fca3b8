"""Assembly capability gaps (SPEC 5.2 rule 7): shell capabilities a run needs but the
runtime lacks, named as such (never worked around with ``transientEnv`` or tokens).

A gap names the capability, the tool that would provide it and what needs it: the smoke
check's list, or a tool credential the run asked for (a code-host token is useless without
the code-host CLI; an SSH key or a terminal passthrough token without ``ssh``).
"""

from __future__ import annotations

import shutil

from runner_assembly.contract.plan import SecretUse

SHELL_CAPABILITIES = {"gh": "code-host-cli", "curl": "http-client", "ssh": "ssh-client"}
"""The smoke-check tools that are shell capabilities, by the capability they provide."""
CREDENTIAL_TOOLS: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("git-host", "pull-request"): ("gh",), ("git-host", "git-host-ssh"): ("ssh",),
    ("ext-ssh", None): ("ssh",)}
"""The shell tools a tool credential is used with (``None``: any purpose)."""


def _needed_by(use: SecretUse) -> tuple[str, ...]:
    tool, purpose = str(use.tool), use.purpose
    return CREDENTIAL_TOOLS.get((tool, purpose)) or CREDENTIAL_TOOLS.get((tool, None), ())


def capability_gaps(secrets: list[SecretUse], smoke: list[dict[str, object]],
                    path: str) -> list[dict[str, object]]:
    """Each missing shell capability once per need: ``capability``, ``tool``,
    ``requiredBy`` (``smoke-check`` or ``<tool>/<purpose>`` of a tool credential)."""
    gaps: list[dict[str, object]] = []
    for entry in smoke:
        name = str(entry["name"])
        if not entry["found"] and name in SHELL_CAPABILITIES:
            gaps.append({"capability": SHELL_CAPABILITIES[name], "tool": name,
                         "requiredBy": "smoke-check"})
    for use in secrets:
        if use.role != "tool":
            continue
        for name in _needed_by(use):
            if shutil.which(name, path=path) is None:
                gaps.append({"capability": SHELL_CAPABILITIES[name], "tool": name,
                             "requiredBy": f"{use.tool}/{use.purpose}"})
    return gaps
