"""gunicorn's side of `config.frontdoor`: kept-alive connections, and its answers passed on
to the client as they arrive."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from config.frontdoor import (
    CRLF,
    HEAD_LIMIT,
    PIECE,
    POOL_SIZE,
    RESPONSE_TIMEOUT,
    UPSTREAM_CONCURRENCY,
    UPSTREAM_IDLE,
    UPSTREAM_WAIT,
)
from config.frontdoor.incoming import CHUNKED, HttpError, Request

log = logging.getLogger("frontdoor")


class NoAnswer(Exception):
    """gunicorn's connection broke once the request was on its way: the client gets none."""


@dataclass
class Upstream:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False
    idle_since: float = field(default_factory=time.monotonic)

    def stale(self) -> bool:
        return (
            self.reader.at_eof()
            or self.writer.is_closing()
            or time.monotonic() - self.idle_since > UPSTREAM_IDLE
        )

    def close(self) -> None:
        self.writer.close()


class Pool:
    """Kept-alive connections to gunicorn, the most recently used first."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.idle: list[Upstream] = []
        self.slots = asyncio.Semaphore(UPSTREAM_CONCURRENCY)

    async def _open(self) -> Upstream:
        if self.address.startswith("unix:"):
            reader, writer = await asyncio.open_unix_connection(self.address[5:], limit=HEAD_LIMIT)
        else:
            host, _, port = self.address.rpartition(":")
            reader, writer = await asyncio.open_connection(
                host.strip("[]"), int(port), limit=HEAD_LIMIT
            )
        return Upstream(reader, writer)

    async def connect(self, *, fresh: bool = False) -> Upstream:
        """An idle connection, else a new one; waits up to UPSTREAM_WAIT for gunicorn."""
        while self.idle and not fresh:
            upstream = self.idle.pop()
            if not upstream.stale():
                upstream.reused = True
                return upstream
            upstream.close()
        deadline, delay = time.monotonic() + UPSTREAM_WAIT, 0.05
        while True:
            try:
                return await self._open()
            except OSError as exc:
                if time.monotonic() + delay > deadline:
                    log.warning("gunicorn at %s is not accepting: %s", self.address, exc)
                    raise HttpError(503, "the web server is restarting") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)

    def release(self, upstream: Upstream) -> None:
        if len(self.idle) >= POOL_SIZE or upstream.stale():
            upstream.close()
            return
        upstream.reused, upstream.idle_since = False, time.monotonic()
        self.idle.append(upstream)

    def sweep(self) -> None:
        keep = [upstream for upstream in self.idle if not upstream.stale()]
        for upstream in self.idle:
            if upstream not in keep:
                upstream.close()
        self.idle = keep


@dataclass
class ResponseHead:
    status: int
    lines: list[bytes]  # the status line and the headers to pass on
    length: int | None  # None: read to the end of the connection; CHUNKED: chunked
    reusable: bool  # gunicorn keeps the connection open after this response


async def read_response_head(upstream: Upstream, method: bytes) -> tuple[bytes, ResponseHead]:
    async with asyncio.timeout(RESPONSE_TIMEOUT):
        raw = await upstream.reader.readuntil(CRLF + CRLF)
    lines = raw[: -len(CRLF + CRLF)].split(CRLF)
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise NoAnswer("malformed response from gunicorn")
    status = int(parts[1])
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers.append((name.strip().lower(), value.strip(b" \t"), line))
    connection = {
        token.strip().lower()
        for name, value, _ in headers
        if name == b"connection"
        for token in value.split(b",")
    }
    chunked = any(name == b"transfer-encoding" for name, _, _ in headers)
    declared = [value for name, value, _ in headers if name == b"content-length"]
    if method == b"HEAD" or status in (204, 304) or status < 200:
        length: int | None = 0
    elif chunked:
        length = CHUNKED
    elif declared and declared[0].isdigit():
        length = int(declared[0])
    else:
        length = None
    reusable = length is not None and b"close" not in connection and parts[0] == b"HTTP/1.1"
    passed = [line for name, _, line in headers if name not in (b"connection", b"keep-alive")]
    return raw, ResponseHead(status, [lines[0], *passed], length, reusable)


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: int) -> None:
    while count:
        async with asyncio.timeout(RESPONSE_TIMEOUT):
            data = await reader.read(min(count, PIECE))
        if not data:
            raise asyncio.IncompleteReadError(b"", count)
        writer.write(data)
        await writer.drain()
        count -= len(data)


async def _copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Pass a chunked body on as it is, reading the sizes to find where it ends."""
    while True:
        async with asyncio.timeout(RESPONSE_TIMEOUT):
            line = await reader.readuntil(CRLF)
        writer.write(line)
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            while True:
                async with asyncio.timeout(RESPONSE_TIMEOUT):
                    trailer = await reader.readuntil(CRLF)
                writer.write(trailer)
                if trailer == CRLF:
                    await writer.drain()
                    return
        await _copy(reader, writer, size + len(CRLF))


async def _copy_to_end(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        async with asyncio.timeout(RESPONSE_TIMEOUT):
            data = await reader.read(PIECE)
        if not data:
            return
        writer.write(data)
        await writer.drain()


async def relay_response(
    upstream: Upstream, request: Request, client: asyncio.StreamWriter
) -> tuple[bool, bool]:
    """gunicorn's answer to `request`, passed on to the client. Returns (the connection to
    gunicorn may be reused, the client's may). Interim 1xx answers are passed on first."""
    try:
        _, head = await read_response_head(upstream, request.method)
        while 100 <= head.status < 200:
            client.write(CRLF.join(head.lines) + CRLF + CRLF)
            _, head = await read_response_head(upstream, request.method)
    except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
        raise NoAnswer(str(exc) or type(exc).__name__) from None
    keep_client = request.keep_alive and head.length is not None
    lines = head.lines if keep_client else [*head.lines, b"connection: close"]
    client.write(CRLF.join(lines) + CRLF + CRLF)
    if head.length == CHUNKED:
        await _copy_chunked(upstream.reader, client)
    elif head.length is None:
        await _copy_to_end(upstream.reader, client)
    elif head.length:
        await _copy(upstream.reader, client, head.length)
    else:
        await client.drain()
    return head.reusable, keep_client
