"""A stand-in for the OpenAI Responses API, for driving the real Codex CLI in tests.

An HTTP server on a loopback port: ``GET /v1/models`` lists one model; ``POST /v1/responses``
answers a stream of server-sent events (``response.created``, ``response.output_item.done``,
``response.completed`` with token usage). What it answers follows the request, so a run of
Codex is deterministic: a request whose newest user message holds a line ``run: <command>``
and has no tool result yet gets a function call of the shell tool Codex offers
(``exec_command``) running that command; any other request gets an assistant message
(``done: <n> user messages``). Every request body is kept (:attr:`MockResponses.requests`)
so a test can check what Codex sent, e.g. the earlier turns of a resumed thread.

    python -m tests.codex_mock      # serves until interrupted, prints its base URL
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "mock-model"
USAGE = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 20},
         "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 5},
         "total_tokens": 150}
"""The token usage every response reports."""


def _texts(item: dict[str, Any]) -> list[str]:
    content = item.get("content")
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [str(part.get("text", "")) for part in content if isinstance(part, dict)]
    return []


def user_messages(body: dict[str, Any]) -> list[str]:
    """The text of each user message of a request's ``input``, oldest first."""
    return ["\n".join(_texts(item)) for item in body.get("input", [])
            if isinstance(item, dict) and item.get("type") == "message"
            and item.get("role") == "user"]


def shell_tool(body: dict[str, Any]) -> str | None:
    """The name of the shell tool the request offers (None: none)."""
    names = [str(tool.get("name")) for tool in body.get("tools", []) if isinstance(tool, dict)]
    for name in ("exec_command", "shell", "local_shell"):
        if name in names:
            return name
    return None


def _command_of(body: dict[str, Any]) -> str | None:
    """The ``run:`` command of the newest user message, unless a tool result followed it."""
    items = [item for item in body.get("input", []) if isinstance(item, dict)]
    for item in reversed(items):
        if item.get("type") == "function_call_output":
            return None
        if item.get("type") == "message" and item.get("role") == "user":
            for line in "\n".join(_texts(item)).splitlines():
                if line.startswith("run: "):
                    return line.removeprefix("run: ").strip()
            return None
    return None


def reply_items(body: dict[str, Any], number: int) -> list[dict[str, Any]]:
    """The output items answering the request ``body`` (the ``number``-th one)."""
    command, tool = _command_of(body), shell_tool(body)
    if command is not None and tool is not None:
        arguments = {"cmd": command} if tool == "exec_command" else {"command": ["bash", "-lc",
                                                                                 command]}
        return [{"type": "function_call", "id": f"fc_{number}", "call_id": f"call_{number}",
                 "name": tool, "arguments": json.dumps(arguments)}]
    text = f"done: {len(user_messages(body))} user messages"
    return [{"type": "message", "role": "assistant", "id": f"msg_{number}",
             "content": [{"type": "output_text", "text": text, "annotations": []}]}]


def sse(events: list[dict[str, Any]]) -> bytes:
    """The events as a server-sent event stream."""
    return b"".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
                    for event in events)


class MockResponses:
    """The server, on a free loopback port, in a thread of its own."""

    def __init__(self) -> None:
        """Bind to ``127.0.0.1`` on a free port (not serving yet: :meth:`start`)."""
        self.requests: list[dict[str, Any]] = []
        self.authorizations: list[str] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """The ``/v1`` base URL Codex's model provider is pointed at."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def start(self) -> MockResponses:
        """Serve in the background."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def responses(self) -> list[dict[str, Any]]:
        """The ``POST /v1/responses`` bodies received so far."""
        with self._lock:
            return list(self.requests)

    def _record(self, body: dict[str, Any], authorization: str) -> int:
        with self._lock:
            self.requests.append(body)
            self.authorizations.append(authorization)
            return len(self.requests)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        mock = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                """Quiet: the test reads :attr:`MockResponses.requests`."""

            def _send(self, status: int, content_type: str, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.split("?")[0].rstrip("/").endswith("/models"):
                    listing = {"object": "list", "data": [
                        {"id": MODEL, "object": "model", "created": 0, "owned_by": "mock"}]}
                    self._send(200, "application/json", json.dumps(listing).encode())
                else:
                    self._send(404, "application/json", b'{"error": "not found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if not self.path.split("?")[0].endswith("/responses"):
                    self._send(404, "application/json", b'{"error": "not found"}')
                    return
                body = json.loads(raw or b"{}")
                number = mock._record(body, self.headers.get("Authorization", ""))
                response_id = f"resp_{number}"
                events: list[dict[str, Any]] = [{"type": "response.created", "response": {
                    "id": response_id, "object": "response", "status": "in_progress"}}]
                events += [{"type": "response.output_item.done", "output_index": index,
                            "item": item}
                           for index, item in enumerate(reply_items(body, number))]
                events.append({"type": "response.completed", "response": {
                    "id": response_id, "object": "response", "status": "completed",
                    "usage": USAGE}})
                self._send(200, "text/event-stream", sse(events))

        return Handler


def config_toml(base_url: str) -> str:
    """A Codex ``config.toml`` pointing Codex at the mock (the key comes from ``auth.json``
    or the ``MOCK_API_KEY`` variable, never from this file)."""
    return (f'model = "{MODEL}"\nmodel_provider = "mock"\n'
            'approval_policy = "never"\n\n'
            '[model_providers.mock]\nname = "mock"\n'
            f'base_url = "{base_url}"\nwire_api = "responses"\n'
            'requires_openai_auth = true\n')


if __name__ == "__main__":
    served = MockResponses().start()
    print(served.base_url, flush=True)
    try:
        served.thread.join()
    except KeyboardInterrupt:
        served.stop()
