"""Validation of deployment manifests: every violation, with its JSON path and a sentence."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import yaml

from manifests.model import DeploymentManifest
from manifests.schema import DEFAULT_ENDPOINT, generate, python_pattern


@dataclass(frozen=True)
class Violation:
    """One broken rule: where (JSON path) and what, in a plain sentence."""

    path: str
    message: str


class _Loader(yaml.SafeLoader):
    """YAML without implicit timestamps: dates stay strings, as in JSON."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load(path: Path) -> object:
    """Read a manifest file (YAML or JSON)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)


def _json_path(parts: Iterable[str | int]) -> str:
    path = "$"
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


_SENTENCES = {
    "pattern": "{field!r} must match {expected}, got {value!r}",
    "enum": "{field!r} must be one of {choices}",
    "const": "{field!r} must equal the configured deployment endpoint {expected}",
    "minLength": "{field!r} must be at least {expected} character(s) long",
    "maxLength": "{field!r} must be at most {expected} character(s) long",
    "minItems": "{field!r} needs at least {expected} item(s)",
    "minimum": "{field!r} must be at least {expected}, got {value!r}",
    "type": "{field!r} must be of type {expected}, got {kind}",
    "format": "{field!r} must be a {expected} (RFC 3339), got {value!r}",
}
"""The sentence of each broken rule (``required`` and ``additionalProperties`` list names)."""


def _sentence(error: jsonschema.ValidationError) -> str:
    value: Any = error.instance
    rule: Any = error.validator
    expected: Any = error.validator_value
    schema: Any = error.schema
    field = error.path[-1] if error.path else "the manifest"
    if rule == "required":
        missing = [name for name in expected if name not in (value or {})]
        fields = "field" if len(missing) == 1 else "fields"
        verb = "is" if len(missing) == 1 else "are"
        return f"required {fields} {', '.join(map(repr, missing))} {verb} missing"
    if rule == "additionalProperties":
        known = set(schema.get("properties", {}))
        extra = sorted(set(value) - known) if isinstance(value, dict) else []
        return f"unknown field {', '.join(map(repr, extra))} is not allowed"
    template = _SENTENCES.get(rule)
    if template is None:
        return error.message
    choices = ", ".join(map(str, expected)) if rule == "enum" else ""
    return template.format(field=field, expected=expected, value=value, choices=choices,
                           kind=type(value).__name__)


def _whole_pattern(validator: object, pattern: str, instance: object,
                   schema: dict[str, object]) -> Iterator[jsonschema.ValidationError]:
    """``pattern`` with JSON Schema's meaning of ``$``: the end of input, not before a final
    newline (as Python's ``re`` would have it)."""
    if isinstance(instance, str) and re.search(python_pattern(pattern), instance) is None:
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_extend: Callable[..., Any] = jsonschema.validators.extend  # untyped in the stubs
ManifestValidator = _extend(jsonschema.Draft202012Validator, {"pattern": _whole_pattern})
"""Draft 2020-12 with ECMA-262 end anchors: the validator every manifest goes through."""


def violations(document: object, endpoint: str | None = None) -> list[Violation]:
    """Every violation of the manifest rules (empty when valid)."""
    schema = generate(endpoint or DEFAULT_ENDPOINT)
    validator = ManifestValidator(schema, format_checker=ManifestValidator.FORMAT_CHECKER)
    found = [Violation(_json_path(e.absolute_path), _sentence(e))
             for e in validator.iter_errors(document)]
    if not found:  # the typed model must agree; report it if it ever does not
        try:
            parse(document, endpoint)
        except msgspec.ValidationError as error:
            found.append(Violation("$", str(error)))
    # ``required`` breaks once per missing field, each sentence naming them all: one line.
    return sorted(set(found), key=lambda v: (v.path, v.message))


def parse(document: object, endpoint: str | None = None) -> DeploymentManifest:
    """The typed manifest, or ``msgspec.ValidationError``; ``endpoint`` is checked against
    the configured deployment endpoint, which no static type can know."""
    manifest = msgspec.convert(document, DeploymentManifest)
    expected = endpoint or DEFAULT_ENDPOINT
    if manifest.endpoint is not msgspec.UNSET and manifest.endpoint != expected:
        raise msgspec.ValidationError(
            f"Expected `endpoint` to equal the configured endpoint {expected} - at `$.endpoint`")
    return manifest
