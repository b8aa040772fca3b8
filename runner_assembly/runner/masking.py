"""Masking by value: every secret value the runner projected is cut from every line it emits.

The runner registers each value it projects (profile secret files, tool env and volume
credentials, the repository credential, transient env values, ``LAB_API_KEY``). Each value is
masked raw, base64 in its three alignments (standard and URL-safe alphabets), URL-encoded and
JSON-escaped. All forms of all values are one RE2 alternation compiled once: the scan is
linear in the text, whatever the text holds.

Values shorter than :data:`MIN_MASK_LENGTH` characters are not masked by value: a value like
``k``, ``true`` or ``1234`` occurs everywhere in ordinary output, and cutting every occurrence
would destroy the text while hiding nothing (the pattern net of
:mod:`ledger.redaction` still applies to them).

Streams are masked per complete line; a line longer than :data:`MAX_CARRY` bytes is flushed
in pieces that keep the last ``longest form - 1`` bytes back, so a value split across writes
(or across pieces) is still seen whole.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import tomllib
from collections.abc import Callable, Iterable
from typing import IO, TYPE_CHECKING, Protocol, overload
from urllib.parse import quote, quote_plus

import re2

from runner_assembly.runner.config_secrets import CONFIGURATION_FILES, credential_strings

if TYPE_CHECKING:
    from ledger.redaction import RE2Pattern

MIN_MASK_LENGTH = 6
"""Shorter values are not masked by value: they would cut ordinary words and numbers."""
MASK = "[masked]"
MAX_CARRY = 64 * 1024
"""Bytes of an unfinished line held back before a piece of it is flushed."""
RELAY_GRACE = 10.0
"""Seconds the relays may run on after the backend exited."""
_MAX_MEM = 256 << 20
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def encoded_forms(value: str) -> set[bytes]:
    """The forms in which ``value`` could leak: raw, base64 (3 alignments), URL, JSON."""
    raw = value.encode()
    forms = {raw, json.dumps(value)[1:-1].encode(),
             json.dumps(value, ensure_ascii=False)[1:-1].encode(),
             quote(value, safe="").encode(), quote(value).encode(),
             quote_plus(value, safe="").encode()}
    for shift in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            forms.add(_base64_core(encode(b"\0" * shift + raw), shift, len(raw)))
    return {form for form in forms if len(form) >= 4}


def _base64_core(encoded: bytes, shift: int, size: int) -> bytes:
    """The base64 characters that depend only on the value, whatever surrounds it."""
    core = encoded.rstrip(b"=")[(0, 2, 3)[shift]:]
    return core[:-1] if (shift + size) % 3 else core


def _literal(form: bytes) -> bytes:
    """``form`` as an RE2 literal (Latin-1 mode: each byte one character)."""
    return b"".join(bytes([byte]) if byte in _WORD_BYTES else b"\\x%02x" % byte
                    for byte in form)


class Masker:
    """The values registered so far and the one compiled pattern that finds them all."""

    def __init__(self) -> None:
        self._forms: set[bytes] = set()
        self._pattern: RE2Pattern | None = None
        self._dirty = False
        self._lock = threading.Lock()
        self.longest = 0

    def add(self, value: str) -> None:
        """Register one secret value (whitespace around it ignored; a value of several lines
        also line by line, since output is masked per line); short ones are skipped."""
        value = value.strip()
        if len(value) < MIN_MASK_LENGTH:
            return
        lines = value.splitlines()
        if len(lines) > 1:
            self.add_all(lines)
        forms = encoded_forms(value) - self._forms
        if forms:
            with self._lock:
                self._forms |= forms
                self.longest = max(self.longest, *(len(form) for form in forms))
                self._dirty = True

    def add_all(self, values: Iterable[str]) -> None:
        """Register several values."""
        for value in values:
            self.add(value)

    def add_file(self, content: str) -> None:
        """Register a secret file: its whole content, each line and, for JSON or TOML, each
        string value inside it."""
        self.add(content)
        self.add_all(content.splitlines())
        self.add_all(_structured_strings(content))

    def add_secret_file(self, name: str, content: str) -> None:
        """Register the secret key ``name``'s file: a configuration file (``config.toml``,
        ``model-catalog.json``) by its credential-like values only, so model names and
        endpoints stay readable (:mod:`~runner_assembly.runner.config_secrets`); any other
        file, or one that does not parse, whole (:meth:`add_file`)."""
        values = credential_strings(content) if name in CONFIGURATION_FILES else None
        if values is None:
            self.add_file(content)
        else:
            self.add_all(values)

    def _compiled(self) -> RE2Pattern | None:
        with self._lock:
            if self._dirty:
                options = re2.Options()
                options.encoding = re2.Options.Encoding.LATIN1
                options.max_mem = _MAX_MEM
                ordered = sorted(self._forms, key=lambda form: (-len(form), form))
                self._pattern = re2.compile(b"|".join(_literal(f) for f in ordered), options)
                self._dirty = False
            return self._pattern

    def mask(self, data: bytes) -> bytes:
        """``data`` with every registered form replaced by :data:`MASK`."""
        pattern = self._compiled()
        if pattern is None:
            return data
        return bytes(pattern.sub(MASK.encode(), data))

    def mask_text(self, text: str) -> str:
        """:meth:`mask` for text."""
        return self.mask(text.encode()).decode(errors="replace") if self._forms else text

    @overload
    def mask_json(self, value: dict[str, object]) -> dict[str, object]: ...
    @overload
    def mask_json(self, value: object) -> object: ...
    def mask_json(self, value: object) -> object:
        """Mask every string (keys included) inside a JSON-like value."""
        if isinstance(value, str):
            return self.mask_text(value)
        if isinstance(value, dict):
            return {self.mask_text(str(k)): self.mask_json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.mask_json(item) for item in value]
        return value

    def mask_prefix(self, data: bytes, upto: int) -> tuple[bytes, int]:
        """Mask the part of ``data`` that can be emitted now: at least ``upto`` bytes, more
        when a match starting before ``upto`` reaches past it. Returns it and its length."""
        pattern = self._compiled()
        if pattern is None:
            return data[:upto], upto
        pieces, end = [], 0
        for match in pattern.finditer(data):
            if match.start() >= upto:
                break
            pieces += [data[end:match.start()], MASK.encode()]
            end = match.end()
        cut = max(upto, end)
        pieces.append(data[end:cut])
        return b"".join(pieces), cut


def _structured_strings(content: str) -> list[str]:
    """Every string value of a JSON or TOML document; nothing for other content."""
    document: object = None
    try:
        document = json.loads(content)
    except ValueError:
        try:
            document = tomllib.loads(content)
        except ValueError:
            return []
    found: list[str] = []
    stack = [document]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, dict):
            stack += item.values()
        elif isinstance(item, list):
            stack += item
    return found


class LineMasker:
    """Masks a byte stream per complete line before handing it to ``write``."""

    def __init__(self, masker: Masker, write: Callable[[bytes], object],
                 max_carry: int = MAX_CARRY) -> None:
        self.masker = masker
        self.write = write
        self.max_carry = max_carry
        self._carry = b""

    def feed(self, chunk: bytes) -> None:
        """Take more bytes; emit every line they complete."""
        data = self._carry + chunk
        cut = data.rfind(b"\n") + 1
        if cut:
            self.write(self.masker.mask(data[:cut]))
            data = data[cut:]
        if len(data) > max(self.max_carry, 2 * self.masker.longest):
            masked, used = self.masker.mask_prefix(
                data, len(data) - max(self.masker.longest - 1, 0))
            self.write(masked)
            data = data[used:]
        self._carry = data

    def close(self) -> None:
        """Emit what is left (a last line without its newline)."""
        if self._carry:
            self.write(self.masker.mask(self._carry))
            self._carry = b""


class Sink(Protocol):
    """Where a relay writes: a binary file, or a :class:`~runner_assembly.runner.output_bound.
    Bounded` one."""

    def write(self, data: bytes, /) -> object:
        """Take ``data``."""

    def flush(self) -> object:
        """Push what was taken to its file."""


def relay(source: IO[bytes], sink: Sink, masker: Masker,
          written: Callable[[], object] | None = None) -> None:
    """Copy ``source`` to ``sink`` until its end, masked per line and flushed as it goes;
    ``written`` is told after each flush (the line shipper's doorbell)."""
    def write(data: bytes) -> None:
        sink.write(data)
        sink.flush()
        if written is not None:
            written()

    lines = LineMasker(masker, write)
    while chunk := os.read(source.fileno(), 65536):
        lines.feed(chunk)
    lines.close()


class Relays:
    """Relays several streams at once (a backend's stdout and stderr), each in a thread."""

    def __init__(self, pairs: list[tuple[IO[bytes], Sink]], masker: Masker,
                 written: Callable[[], object] | None = None) -> None:
        self.threads = [threading.Thread(target=relay, args=(source, sink, masker, written),
                                         daemon=True) for source, sink in pairs]
        for thread in self.threads:
            thread.start()

    def join(self, grace: float = RELAY_GRACE) -> None:
        """Wait for every stream to end, at most ``grace`` seconds (a process the backend
        left behind may hold its output open)."""
        deadline = time.monotonic() + grace
        for thread in self.threads:
            thread.join(max(deadline - time.monotonic(), 0))
