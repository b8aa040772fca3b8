"""Schemathesis hooks for ``tests/test_api_fuzz.py``: a check that every 4xx answer is the
error envelope of DESIGN.md 5 (``--checks all`` runs it with the built-in ones)."""

from __future__ import annotations

import json
from typing import Any

import schemathesis


@schemathesis.check
def error_envelope(ctx: Any, response: Any, case: Any) -> None:
    """A 4xx or 5xx answer is ``{"error": {"code", "message", "details"}}`` and nothing else
    (an OPTIONS answer has no body)."""
    if response.status_code < 400:
        return
    body = json.loads(response.content)
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message", "details"} <= set(error), body
    assert error["code"] and error["message"], body
