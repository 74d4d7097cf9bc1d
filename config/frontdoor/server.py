"""The front door's server: each client connection read by `incoming`, each complete request
passed to gunicorn by `upstream`; `main` is `python -m config.frontdoor`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from datetime import UTC, datetime
from typing import IO

from config.frontdoor import (
    CRLF,
    HEAD_LIMIT,
    HEAD_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_CLIENTS,
    PIECE,
    STOP_GRACE,
)
from config.frontdoor.clients import Network, client_address, trusted_proxies
from config.frontdoor.incoming import HttpError, Request, body_deadline, parse_head, read_body
from config.frontdoor.upstream import NoAnswer, Pool, Upstream, relay_response

_REASONS = {
    400: "Bad Request", 408: "Request Timeout", 413: "Content Too Large",
    431: "Request Header Fields Too Large", 501: "Not Implemented",
    503: "Service Unavailable",
}  # fmt: skip

log = logging.getLogger("frontdoor")


# The application's own codes where it has one for the same refusal (docs/api.md#errors), so
# that a client need not know which process answered.
_CODES = {413: "body_too_large", 503: "unavailable"}


def _error_response(status: int, detail: str) -> bytes:
    code = _CODES.get(status) or _REASONS[status].lower().replace(" ", "_")
    body = json.dumps({"error": code, "detail": detail})
    lines = [
        f"HTTP/1.1 {status} {_REASONS[status]}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if status == 503:
        lines.append("retry-after: 1")
    return ("\r\n".join(lines) + "\r\n\r\n" + body).encode()


class FrontDoor:
    def __init__(self, upstream: str, trusted: tuple[Network, ...] = ()) -> None:
        self.pool = Pool(upstream)
        self.trusted = trusted
        self.clients = 0
        self.in_flight = 0

    async def read_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bool
    ) -> Request | None:
        """The next complete request on this connection; None when the client is done."""
        try:
            async with asyncio.timeout(HEAD_TIMEOUT if first else IDLE_TIMEOUT):
                raw = await reader.readuntil(CRLF + CRLF)
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise HttpError(400, "the request ended early") from None
            return None
        except asyncio.LimitOverrunError:
            raise HttpError(431, f"request line and headers exceed {HEAD_LIMIT} bytes") from None
        except TimeoutError:
            if first:
                raise HttpError(408, "the request's headers did not arrive in time") from None
            return None
        request = parse_head(raw)
        if b"100-continue" in {v.lower() for n, v in request.headers if n == b"expect"}:
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if request.length:
            try:
                async with asyncio.timeout(body_deadline(request.length)):
                    await read_body(reader, request)
            except TimeoutError:
                raise HttpError(408, "the request's body did not arrive in time") from None
        return request

    async def forward(self, request: Request, peer: str, writer: asyncio.StreamWriter) -> bool:
        """Send `request` to gunicorn and its answer back; True if the client's connection
        stays open for another request."""
        head = request.head_for(client_address(peer, request.forwarded, self.trusted))
        idempotent = request.method in (b"GET", b"HEAD", b"OPTIONS")
        async with self.pool.slots:
            upstream = await self.pool.connect()
            try:
                await self._send(upstream, head, request.body)
                reusable, keep = await relay_response(upstream, request, writer)
            except NoAnswer:
                upstream.close()
                if not (idempotent and upstream.reused):
                    raise
                upstream = await self.pool.connect(fresh=True)
                await self._send(upstream, head, request.body)
                reusable, keep = await relay_response(upstream, request, writer)
            except BaseException:
                upstream.close()
                raise
            if reusable:
                self.pool.release(upstream)
            else:
                upstream.close()
        return keep

    @staticmethod
    async def _send(upstream: Upstream, head: bytes, body: bytes | IO[bytes]) -> None:
        try:
            if isinstance(body, bytes):
                upstream.writer.write(head + body)
            else:
                body.seek(0)
                upstream.writer.write(head)
                while piece := body.read(PIECE):
                    upstream.writer.write(piece)
                    await upstream.writer.drain()
            await upstream.writer.drain()
        except OSError as exc:
            raise NoAnswer(str(exc)) from None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.clients >= MAX_CLIENTS:
            writer.close()
            return
        self.clients += 1
        peer = writer.get_extra_info("peername")
        peer_ip = peer[0] if isinstance(peer, tuple) else ""
        try:
            await self._serve_requests(reader, writer, peer_ip)
        except HttpError as exc:
            with contextlib.suppress(OSError):
                writer.write(_error_response(exc.status, exc.detail))
                await writer.drain()
        except NoAnswer as exc:
            log.warning("gunicorn's connection broke before it answered: %s", exc)
        except (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away, or stopped reading
        finally:
            self.clients -= 1
            writer.close()

    async def _serve_requests(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str
    ) -> None:
        first = True
        while True:
            request = await self.read_request(reader, writer, first)
            if request is None:
                return
            self.in_flight += 1
            try:
                keep = await self.forward(request, peer, writer)
            finally:
                self.in_flight -= 1
                request.close()
            if not keep:
                return
            first = False


# --- Running -------------------------------------------------------------------------------------


class _JsonLines(logging.Formatter):
    """The shape of the application's JSON log lines (`ledger.observability.jsonlog`), without
    loading it:
    this process never imports Django."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        return json.dumps(line)


def _configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("LOG_FORMAT", "json") == "json":
        handler.setFormatter(_JsonLines())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(os.environ.get("LOG_LEVEL", "INFO").upper())
    log.propagate = False


async def _sweep(pool: Pool) -> None:
    while True:
        await asyncio.sleep(5)
        pool.sweep()


async def serve(bind: str, upstream: str, trusted: tuple[Network, ...] = ()) -> None:
    """Listen on `bind` (HOST:PORT) until SIGTERM, SIGINT or SIGHUP, then let the requests
    under way finish (at most STOP_GRACE seconds)."""
    door = FrontDoor(upstream, trusted)
    host, _, port = bind.rpartition(":")
    server = await asyncio.start_server(
        door.serve, host.strip("[]") or None, int(port), limit=HEAD_LIMIT, backlog=1024
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)
    sweeper = asyncio.create_task(_sweep(door.pool))
    log.info("listening on %s; complete requests go to gunicorn at %s", bind, upstream)
    await stop.wait()
    server.close()
    deadline = time.monotonic() + STOP_GRACE
    while door.in_flight and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    sweeper.cancel()
    log.info("stopped")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m config.frontdoor",
        description="Buffer each HTTP request completely, then pass it to gunicorn.",
    )
    parser.add_argument("--bind", required=True, help="HOST:PORT to listen on")
    parser.add_argument("--upstream", required=True, help="gunicorn: unix:PATH or HOST:PORT")
    args = parser.parse_args(argv)
    _configure_logging()
    try:
        trusted = trusted_proxies()
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    asyncio.run(serve(args.bind, args.upstream, trusted))
    return 0
