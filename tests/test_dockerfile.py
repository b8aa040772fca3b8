"""The service image's Dockerfile builds on a base pinned by digest (issue 28 item 5): every
``FROM`` names an image by ``@sha256:`` (directly, through a build argument's default, or a
stage of the same file), so a rebuild never takes a moved tag."""

from __future__ import annotations

import re
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parents[1] / "Dockerfile"
PINNED = re.compile(r"^[\w./:-]+@sha256:[0-9a-f]{64}$")


def _instructions() -> list[tuple[str, str]]:
    lines = DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
    return [(word.upper(), rest.strip()) for word, _, rest in
            (line.strip().partition(" ") for line in lines if line.strip()
             and not line.lstrip().startswith("#"))]


def test_every_base_image_is_pinned_by_digest() -> None:
    arguments: dict[str, str] = {}
    stages: set[str] = set()
    bases = []
    for instruction, rest in _instructions():
        if instruction == "ARG" and "=" in rest:
            name, _, default = rest.partition("=")
            arguments[name.strip()] = default.strip()
        elif instruction == "FROM":
            image, *alias = rest.split()
            image = re.sub(r"\$\{(\w+)\}|\$(\w+)",
                           lambda m: arguments.get(m.group(1) or m.group(2), m.group(0)),
                           image)
            bases.append(image)
            if len(alias) == 2 and alias[0].upper() == "AS":
                stages.add(alias[1])
            assert image in stages or PINNED.match(image), f"FROM {image} is not pinned"
    assert bases, "the Dockerfile names no base image"
