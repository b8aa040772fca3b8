"""The shape issue 24 gave orchestration and the runner, kept: one call site creates runner
jobs, previews are functions of their own (no ``dry_run`` flag below the API's services),
and no function in ``orchestration/`` or ``runner/`` grows past 50 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BELOW_THE_API = ("ledger", "projections", "runner_assembly")
SHORT = ("runner_assembly/orchestration", "runner_assembly/runner")
MAX_FUNCTION_LINES = 50


def _functions(folder: str) -> Iterator[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield path, node


def test_runner_jobs_are_created_in_one_place() -> None:
    calls = []
    for folder in ("api", "cli", *BELOW_THE_API):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "drivers" in path.parts:
                continue  # the drivers' own wrappers delegate to the driver they wrap
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr == "create" \
                        and isinstance(node.func.value, ast.Attribute) \
                        and node.func.value.attr == "driver":
                    calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(calls) == 1 and calls[0].startswith(
        "runner_assembly/orchestration/materialize.py"), calls


def test_no_dry_run_flag_below_the_api_services() -> None:
    flagged = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"
               for folder in BELOW_THE_API for path, node in _functions(folder)
               for arg in (*node.args.args, *node.args.kwonlyargs)
               if arg.arg in ("dry_run", "dry")]
    assert flagged == []


def test_no_long_functions_in_orchestration_and_the_runner() -> None:
    long = [f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
            f"({node.end_lineno - node.lineno + 1} lines)"
            for folder in SHORT for path, node in _functions(folder)
            if node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []
