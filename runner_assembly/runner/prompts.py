"""Prompt references: read, hashed, capped and injected only when a thread starts.

A required prompt that is missing is ``prompt-unavailable``; one over the per-prompt cap,
or prompts over the total cap, are ``prompt-too-large``. Nothing is ever truncated, and no
event carries prompt text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.plan import PromptItem
from runner_assembly.runner.git import inside


@dataclass(frozen=True)
class Prompts:
    """The prompt entries of the assembly event and the text to inject."""

    entries: list[dict[str, object]]
    injected_text: str


def read_prompts(refs: list[PromptItem], checkout: Path, *, new_thread: bool,
                 max_bytes: int, max_total: int) -> Prompts:
    """Read every prompt reference against the checked-out bundle."""
    entries: list[dict[str, object]] = []
    texts: list[str] = []
    total = 0
    for ref in refs:
        required = ref.required
        path = inside(checkout, ref.path)
        entry = {"name": ref.name, "path": ref.path, "inject": ref.inject, "required": required}
        if not path.is_file():
            if required:
                raise AssemblyFailure(FailureKind.PROMPT_UNAVAILABLE,
                                      f"required prompt {ref.name} is missing at "
                                      f"{ref.path}", details={"prompt": ref.name})
            entries.append({**entry, "sha256": None, "bytes": 0, "injected": False,
                            "missing": True})
            continue
        data = path.read_bytes()
        if len(data) > max_bytes:
            raise AssemblyFailure(FailureKind.PROMPT_TOO_LARGE,
                                  f"prompt {ref.name} has {len(data)} bytes; the cap is "
                                  f"{max_bytes}", details={"prompt": ref.name,
                                                           "bytes": len(data), "cap": max_bytes})
        total += len(data)
        if total > max_total:
            raise AssemblyFailure(FailureKind.PROMPT_TOO_LARGE,
                                  f"prompts total more than the cap of {max_total} bytes",
                                  details={"cap": max_total})
        entries.append({**entry, "sha256": hashlib.sha256(data).hexdigest(),
                        "bytes": len(data), "injected": new_thread})
        if new_thread:
            texts.append(data.decode("utf-8", errors="replace"))
    return Prompts(entries=entries, injected_text="\n\n".join(texts))
