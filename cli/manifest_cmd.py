"""``svc manifest validate|schema``: the deployment manifest format of SPEC 2.12."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from cyclopts import App, Parameter

from cli import render

manifest_app = App(name="manifest", help="Deployment manifests (SPEC 2.12).")


@manifest_app.command
def validate(files: Annotated[list[Path], Parameter(
        negative=(), help="Manifest files (YAML or JSON) to check.")], *,
        endpoint: Annotated[str | None, Parameter(
            env_var="SVC_DEPLOY_ENDPOINT",
            help="The deployment endpoint a manifest's endpoint field must equal.")] = None,
        output: Annotated[render.RawOption | None, Parameter(name="*")] = None,
        ) -> int:
    """Check YAML or JSON manifests; print every violation with its JSON path (--raw: one
    JSON object a file).

    Exit status 0 when all are valid, 1 when any is not, 2 when a file cannot be read.

    Example: svc manifest validate deploy/*.yaml --endpoint https://svc.example
    """
    import yaml

    from manifests.validate import load, violations

    status = 0
    for path in files:
        try:
            document = load(path)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            render.error("invalid-request", f"{path}: cannot read: {error}")
            status = 2
            continue
        found = violations(document, endpoint)
        status = max(status, 1 if found else 0)
        if output and output.raw:
            render.json_line({"file": str(path), "valid": not found, "violations": [
                {"path": v.path, "message": v.message} for v in found]})
            continue
        if not found:
            render.out(f"{path}: valid")
            continue
        render.out(f"{path}: {len(found)} violation(s)")
        for violation in found:
            render.out(f"  {violation.path}: {violation.message}")
    return status


@manifest_app.command
def schema(*, endpoint: Annotated[str | None, Parameter(
        env_var="SVC_DEPLOY_ENDPOINT", help="The endpoint the schema fixes.")] = None,
        output: Annotated[render.RawOption | None, Parameter(name="*")] = None) -> int:
    """Print the JSON Schema of deployment manifests (indented; --raw: on one line).

    Example: svc manifest schema --endpoint https://svc.example > manifest.schema.json
    """
    from manifests.schema import generate
    from manifests.schema import render as render_schema

    document = generate(endpoint)
    if output and output.raw:
        render.json_line(document)
    else:
        print(render_schema(document), end="")
    return 0
