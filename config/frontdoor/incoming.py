"""Reading a client's request completely: line, headers and body, under the limits of
`config.frontdoor`."""

from __future__ import annotations

import asyncio
import re
import tempfile
from dataclasses import dataclass, field
from typing import IO

from config.frontdoor import (
    API_MAX_BODY,
    API_PREFIX,
    BODY_MIN_RATE,
    BODY_TIMEOUT,
    CRLF,
    MAX_BODY,
    PIECE,
    SPOOL_AT,
)

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,15}")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HOP_BY_HOP = frozenset(
    {
        b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer",
        b"transfer-encoding", b"upgrade", b"expect", b"content-length", b"x-forwarded-for",
    }
)  # fmt: skip


class HttpError(Exception):
    """A request this proxy answers itself, and then closes the connection."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass
class Request:
    method: bytes
    target: bytes
    version: bytes
    headers: list[tuple[bytes, bytes]]
    keep_alive: bool
    body: bytes | IO[bytes] = b""
    length: int = 0
    # What the client sent as X-Forwarded-For: read only when its peer is a trusted proxy
    # (`config.frontdoor.clients`), never passed on as sent.
    forwarded: list[bytes] = field(default_factory=list)

    @property
    def limit(self) -> int:
        """The largest body this request may carry: the agent API's own limit under /api/."""
        return API_MAX_BODY if self.target.startswith(API_PREFIX) else MAX_BODY

    def head_for(self, client: str) -> bytes:
        """The request line and headers as gunicorn gets them: hop-by-hop headers dropped,
        the body's length and the client's address set by us."""
        lines = [b"%s %s %s" % (self.method, self.target, self.version)]
        lines += [name + b": " + value for name, value in self.headers]
        if client:
            lines.append(b"x-forwarded-for: " + client.encode())
        if self.length or self.method not in (b"GET", b"HEAD", b"OPTIONS", b"DELETE"):
            lines.append(b"content-length: %d" % self.length)
        if self.version == b"HTTP/1.0":
            lines.append(b"connection: close")
        return CRLF.join(lines) + CRLF + CRLF

    def close(self) -> None:
        if not isinstance(self.body, bytes):
            self.body.close()


def _tokens(headers: list[tuple[bytes, bytes]], name: bytes) -> set[bytes]:
    return {
        token.strip().lower()
        for key, value in headers
        if key == name
        for token in value.split(b",")
        if token.strip()
    }


def parse_head(raw: bytes) -> Request:
    """A request line and header block (ending in a blank line) as sent by the client."""
    lines = raw.lstrip(CRLF)[: -len(CRLF + CRLF)].split(CRLF)
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise HttpError(400, "malformed request line")
    method, target, version = parts
    if version not in (b"HTTP/1.1", b"HTTP/1.0"):
        raise HttpError(400, "only HTTP/1.0 and HTTP/1.1")
    if _BAD_VALUE.search(target):
        raise HttpError(400, "malformed request target")
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # also folded lines, "Name :"
            raise HttpError(400, "malformed header line")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise HttpError(400, "malformed header value")
        headers.append((name.lower(), value))
    connection = _tokens(headers, b"connection")
    keep_alive = version == b"HTTP/1.1" and b"close" not in connection
    dropped = _HOP_BY_HOP | connection
    kept = [(name, value) for name, value in headers if name not in dropped]
    request = Request(method, target, version, kept, keep_alive)
    request.forwarded = [value for name, value in headers if name == b"x-forwarded-for"]
    request.length = _declared_length(headers, request.limit)
    return request


CHUNKED = -1


def too_large(limit: int) -> HttpError:
    # The application's own wording for its limit (ledger.api.middleware).
    return HttpError(413, f"The body is larger than {limit} bytes.")


def _declared_length(headers: list[tuple[bytes, bytes]], limit: int) -> int:
    """The body's length from Content-Length, or CHUNKED; smuggling-shaped framing refused."""
    lengths = {value for name, value in headers if name == b"content-length"}
    encodings = [value for name, value in headers if name == b"transfer-encoding"]
    if encodings:
        if lengths:
            raise HttpError(400, "both Transfer-Encoding and Content-Length")
        if b",".join(encodings).strip().lower() != b"chunked":
            raise HttpError(501, "only the chunked transfer coding")
        return CHUNKED
    if not lengths:
        return 0
    if len(lengths) != 1 or not next(iter(lengths)).isdigit():
        raise HttpError(400, "invalid Content-Length")
    length = int(next(iter(lengths)))
    if length > limit:
        raise too_large(limit)
    return length


class _Body:
    """A body being received: in memory up to SPOOL_AT, then in a temporary file."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self._parts: list[bytes] = []
        self._file: IO[bytes] | None = None

    def add(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise too_large(self.limit)
        if self._file is None and self.size > SPOOL_AT:
            # Closed by Request.close once the request is answered.
            self._file = tempfile.TemporaryFile()  # noqa: SIM115
            self._file.write(b"".join(self._parts))
            self._parts = []
        if self._file is not None:
            self._file.write(data)
        else:
            self._parts.append(data)

    def result(self) -> bytes | IO[bytes]:
        if self._file is None:
            return b"".join(self._parts)
        self._file.seek(0)
        return self._file


async def _read_chunked(reader: asyncio.StreamReader, body: _Body) -> None:
    while True:
        line = await reader.readuntil(CRLF)
        size_text = line.split(b";", 1)[0].strip()
        if not _CHUNK_SIZE.fullmatch(size_text):
            raise HttpError(400, "malformed chunk size")
        size = int(size_text, 16)
        if size == 0:
            while await reader.readuntil(CRLF) != CRLF:  # trailers: dropped
                pass
            return
        if body.size + size > body.limit:
            raise too_large(body.limit)
        body.add(await reader.readexactly(size))
        if await reader.readexactly(2) != CRLF:
            raise HttpError(400, "malformed chunk")


async def read_body(reader: asyncio.StreamReader, request: Request) -> None:
    body = _Body(request.limit)
    if request.length == CHUNKED:
        await _read_chunked(reader, body)
    else:
        left = request.length
        while left:
            data = await reader.read(min(left, PIECE))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            body.add(data)
            left -= len(data)
    request.body, request.length = body.result(), body.size


def body_deadline(length: int) -> float:
    return BODY_TIMEOUT + max(length, 0) / BODY_MIN_RATE
