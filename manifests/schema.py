"""The published JSON Schema, generated from the Structs (``svc manifest schema``)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from manifests.model import DeploymentManifest

SCHEMA_FILE = Path(__file__).with_name("deployment-manifest.schema.json")
DEFAULT_ENDPOINT = "http://127.0.0.1:8080"
SCHEMA_ID = "https://svc.invalid/schemas/deployment-manifest.schema.json"


def generate(endpoint: str | None = None) -> dict[str, object]:
    """JSON Schema (2020-12) of the manifest, with ``endpoint`` fixed to the configured one
    (``SVC_DEPLOY_ENDPOINT``, read by the command line), else :data:`DEFAULT_ENDPOINT`."""
    schema = msgspec.json.schema(DeploymentManifest)
    root = schema["$defs"]["DeploymentManifest"]
    root["properties"]["endpoint"] = {"const": endpoint or DEFAULT_ENDPOINT}
    root["properties"]["createdAt"] = {"type": "string", "format": "date-time"}
    _publish_anchors(schema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            **schema}


PYTHON_END, ECMA_END = "\\Z", "$"


def _publish_anchors(node: object) -> None:
    """Rewrite the model's end-of-input anchor ``\\Z`` (Python) as ``$`` (ECMA-262, the
    dialect of JSON Schema ``pattern``), where both mean the true end of the input."""
    if isinstance(node, dict):
        pattern = node.get("pattern")
        if isinstance(pattern, str) and pattern.endswith(PYTHON_END):
            node["pattern"] = pattern.removesuffix(PYTHON_END) + ECMA_END
        for value in node.values():
            _publish_anchors(value)
    elif isinstance(node, list):
        for value in node:
            _publish_anchors(value)


def python_pattern(pattern: str) -> str:
    """A published (ECMA-262) pattern for Python's ``re``: a final ``$`` becomes ``\\Z``."""
    if pattern.endswith(ECMA_END) and not pattern.endswith("\\" + ECMA_END):
        return pattern.removesuffix(ECMA_END) + PYTHON_END
    return pattern


def render(schema: dict[str, object]) -> str:
    """The schema as committed: sorted keys, two-space indentation, final newline."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def committed() -> dict[str, object]:
    """The schema file shipped with the project."""
    value: dict[str, object] = json.loads(SCHEMA_FILE.read_text())
    return value
