"""The HTTP side every sandbox provider shares: requests, faults, the `/_sandbox/` endpoints,
command-line options and a `serve()` that runs until SIGTERM or SIGINT.

A provider subclasses `Provider` and implements its public API in `handle()`; this module
applies the fault knobs around it, in the order a real outage would: a hang or latency before
anything happens, a 5xx before anything is committed, a lost (dropped) or unreadable answer
only after the effect has been committed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import socketserver
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

from devstack.sandbox.faults import (
    GARBAGE,
    METHODS,
    FaultError,
    Faults,
    FaultSwitch,
    mistyped,
    parse,
)
from devstack.sandbox.store import Store

ROOT = Path(__file__).resolve().parents[2]
MAX_BODY = 1_000_000


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


class HttpError(Exception):
    """An error answer in the providers' common shape: `{"error": {"type", "message"}}`."""

    def __init__(self, status: int, type_: str, message: str, **extra: str) -> None:
        super().__init__(message)
        self.status = status
        self.type = type_
        self.message = message
        self.extra = extra

    def reply(self) -> Reply:
        error = {"type": self.type, "message": self.message, **self.extra}
        return Reply(self.status, {"error": error})


@dataclass
class Reply:
    status: int
    payload: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None  # a body that is not JSON (the `garbage` fault, a statement)
    content_type: str = "application/json"


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def json(self) -> dict[str, Any]:
        """The body as a JSON object; numbers with a fraction become exact Decimals."""
        try:
            data = json.loads(self.body, parse_float=Decimal, parse_constant=_no_constants)
        except (ValueError, RecursionError):
            raise HttpError(400, "invalid_request", "The body is not valid JSON.") from None
        if not isinstance(data, dict):
            raise HttpError(400, "invalid_request", "The body must be a JSON object.")
        return data


@dataclass(frozen=True)
class Options:
    store: Path
    host: str = "127.0.0.1"
    port: int = 0
    faults: Faults = field(default_factory=Faults)
    seed: int | None = None
    # Payments only: confirm charges later and announce them by signed webhook.
    async_mode: bool = False
    async_delay: float = 1.0
    webhook_url: str | None = None
    webhook_secret: str | None = None


class Provider:
    """One sandbox provider: its store, its faults and its public API."""

    name: ClassVar[str]
    default_port: ClassVar[int]
    schema: ClassVar[str]
    takes_async: ClassVar[bool] = False  # whether the --async-mode / --webhook-* options apply

    def __init__(self, options: Options) -> None:
        self.options = options
        self.store = Store(options.store, self.schema)
        self.faults = FaultSwitch(options.faults, options.seed)

    # What a provider implements.
    def handle(self, request: Request, faults: Faults) -> Reply:
        raise NotImplementedError

    def transactions(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def inspect(self, request: Request) -> Reply | None:
        """Further `/_sandbox/` endpoints of one provider; None when the path is not one."""
        return None

    def start(self) -> None:
        """Start (and resume) background work; called once the port is bound."""

    def stop(self) -> None:
        """Stop background work; called on shutdown."""

    # The test and inspection endpoints, never subject to faults.
    def sandbox(self, request: Request) -> Reply:
        match request.method, request.path:
            case "GET", "/_sandbox/health":
                return Reply(
                    200,
                    {
                        "status": "ok",
                        "provider": self.name,
                        "pid": os.getpid(),
                        "store": str(self.store.path),
                    },
                )
            case "GET", "/_sandbox/transactions":
                return Reply(200, {"object": "list", "data": self.transactions()})
            case "GET", "/_sandbox/faults":
                return Reply(200, self.faults.describe())
            case "POST", "/_sandbox/faults":
                return self._set_faults(request.json())
            case "POST", "/_sandbox/reset":
                self.reset()
                self.faults.restore()
                return Reply(200, {"status": "reset"})
        reply = self.inspect(request)
        if reply is None:
            raise HttpError(404, "not_found", f"No such endpoint: {request.method} {request.path}.")
        return reply

    def _set_faults(self, body: dict[str, Any]) -> Reply:
        methods = body.pop("methods", list(METHODS))
        seed = body.pop("seed", None)
        if not isinstance(methods, list) or not set(methods) <= set(METHODS):
            raise HttpError(400, "invalid_request", f"`methods` must be a list from {METHODS}.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise HttpError(400, "invalid_request", "`seed` must be an integer.")
        try:
            faults = parse(body)
        except FaultError as error:
            raise HttpError(400, "invalid_request", str(error)) from None
        self.faults.set(faults, methods)
        if seed is not None:
            self.faults.reseed(seed)
        return Reply(200, self.faults.describe())


class SandboxHandler(BaseHTTPRequestHandler):
    # HTTP/1.1 keeps connections alive between requests, as a real provider's would.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm on, the second waits
    # for the client's delayed ACK and every answer takes 40 ms longer.
    disable_nagle_algorithm = True
    server: SandboxServer

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    # Answered by the providers' router (404 in JSON), not http.server's HTML 501 page.
    do_PUT = do_PATCH = do_DELETE = do_POST

    def _serve(self) -> None:
        provider = self.server.provider
        try:
            request = self._read()
        except HttpError as error:
            # The body may still be on the wire; this connection cannot be reused.
            self.close_connection = True
            self._send(error.reply())
            return
        if request.path.startswith("/_sandbox/"):
            self._send(self._run(lambda: provider.sandbox(request)))
            return
        try:
            faults = provider.faults.for_request(request.method, request.header("X-Sandbox-Fault"))
        except FaultError as error:
            self._send(HttpError(400, "invalid_request", str(error)).reply())
            return
        if faults.hang:
            time.sleep(faults.hang)
        if faults.latency:
            time.sleep(faults.latency / 1000)
        if faults.fail5xx:
            message = f"The provider is unavailable (sandbox fault fail5xx={faults.fail5xx})."
            reply = HttpError(faults.fail5xx, "api_error", message).reply()
            reply.headers["Retry-After"] = "1"
            self._send(reply)
            return
        reply = self._run(lambda: provider.handle(request, faults))
        if faults.drop:
            self._drop()
        elif faults.garbage:
            self._send(Reply(200, raw=GARBAGE))
        elif faults.wrong_types:
            self._send(Reply(200, mistyped(reply.payload)))
        else:
            self._send(reply)

    def _run(self, handler: Callable[[], Reply]) -> Reply:
        try:
            return handler()
        except HttpError as error:
            return error.reply()
        except Exception:
            # The store rolled back; the caller sees a provider error, as from a real one.
            traceback.print_exc()
            return HttpError(500, "api_error", "Internal error in the sandbox provider.").reply()

    def _read(self) -> Request:
        if self.headers.get("Transfer-Encoding"):
            raise HttpError(411, "invalid_request", "Send a Content-Length; no chunked bodies.")
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise HttpError(400, "invalid_request", "Content-Length is not a number.") from None
        if not 0 <= length <= MAX_BODY:
            raise HttpError(413, "invalid_request", f"The body must be at most {MAX_BODY} bytes.")
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        # Blank values kept: `?idempotency_key=` must filter on "", not drop the filter.
        query = {
            name: values[-1] for name, values in parse_qs(url.query, keep_blank_values=True).items()
        }
        path = url.path.rstrip("/") or "/"
        return Request(self.command, path, query, self.headers, body)

    def _send(self, reply: Reply) -> None:
        body = reply.raw if reply.raw is not None else json.dumps(reply.payload).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            # A client that timed out during a `hang` is gone; the effect is committed anyway.
            self.close_connection = True

    def _drop(self) -> None:
        """Close the connection without a byte of answer: the client sees EOF, not a hang."""
        self.close_connection = True
        self.log_message('"%s" dropped (sandbox fault drop)', self.requestline)
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        sys.stderr.write(f"sandbox {self.server.provider.name}: {format % args}\n")


class SandboxServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], provider: Provider) -> None:
        self.provider = provider
        super().__init__(address, SandboxHandler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind also resolves the host's FQDN, which can stall on DNS;
        # a sandbox on 127.0.0.1 does not need it.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that went away is not the provider's problem
        super().handle_error(request, client_address)


def add_arguments(parser: argparse.ArgumentParser, *, payments: bool) -> None:
    """The command-line options, shared by `python -m` and `manage.py sandbox`."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one")
    parser.add_argument("--store", type=Path, help="SQLite file (var/sandbox/<name>.sqlite3)")
    faults = parser.add_argument_group("faults (also per request: X-Sandbox-Fault header)")
    faults.add_argument("--latency", type=int, metavar="MS", help="sleep before handling")
    faults.add_argument("--hang", type=float, metavar="S", help="sleep, then handle anyway")
    faults.add_argument("--drop", action="store_true", help="commit, then send no response")
    faults.add_argument(
        "--fail5xx", type=int, nargs="?", const=503, metavar="STATUS", help="5xx, no commit"
    )
    faults.add_argument(
        "--ignore-keys", action="store_true", help="act as if idempotency keys did not exist"
    )
    faults.add_argument(
        "--reference-only",
        action="store_true",
        help="keep and search keys as a reference, but never deduplicate by them",
    )
    faults.add_argument("--garbage", action="store_true", help="answer 200 with non-JSON")
    faults.add_argument("--wrong-types", action="store_true", help="answer mistyped JSON")
    faults.add_argument("--drop-rate", type=float, metavar="F", help="drop this share of POSTs")
    faults.add_argument("--fail5xx-rate", type=float, metavar="F", help="503 this share of POSTs")
    faults.add_argument("--seed", type=int, help="seed for the rates, for reproducible runs")
    if payments:
        later = parser.add_argument_group("asynchronous confirmation (payments)")
        later.add_argument(
            "--async-mode", action="store_true", help="answer 202 pending, confirm later"
        )
        later.add_argument("--async-delay", type=float, default=1.0, metavar="S")
        later.add_argument("--webhook-url", help="where to POST signed confirmations")
        later.add_argument(
            "--webhook-secret",
            help="HMAC secret (default: $SANDBOX_WEBHOOK_SECRET, else the sandbox-pay entry"
            " of $LEDGER_WEBHOOK_SECRETS)",
        )


FAULT_OPTIONS = (
    "latency",
    "hang",
    "drop",
    "fail5xx",
    "ignore_keys",
    "reference_only",
    "garbage",
    "wrong_types",
    "drop_rate",
    "fail5xx_rate",
)
ASYNC_OPTIONS = ("async_mode", "webhook_url", "webhook_secret")


def options_from(values: Mapping[str, Any], provider: type[Provider]) -> Options:
    """Options from parsed arguments; raises ValueError (or FaultError) on a bad combination."""
    chosen = {name: values[name] for name in FAULT_OPTIONS if values.get(name) not in (None, False)}
    port = values.get("port")
    store = values.get("store") or ROOT / "var" / "sandbox" / f"{provider.name}.sqlite3"
    webhook_url = values.get("webhook_url")
    secret = (
        values.get("webhook_secret")
        or os.environ.get("SANDBOX_WEBHOOK_SECRET")
        or _ledger_secret(os.environ.get("LEDGER_WEBHOOK_SECRETS", ""))
    )
    if webhook_url and not secret:
        raise ValueError(
            "--webhook-url needs --webhook-secret, SANDBOX_WEBHOOK_SECRET or a sandbox-pay"
            " entry in LEDGER_WEBHOOK_SECRETS."
        )
    async_delay = values.get("async_delay")
    if async_delay is not None and async_delay < 0:
        raise ValueError("--async-delay must not be negative.")
    return Options(
        store=Path(store),
        host=values.get("host") or "127.0.0.1",
        port=provider.default_port if port is None else port,
        faults=parse(chosen),
        seed=values.get("seed"),
        async_mode=bool(values.get("async_mode")),
        async_delay=1.0 if async_delay is None else async_delay,
        webhook_url=webhook_url,
        webhook_secret=secret,
    )


def _ledger_secret(secrets_setting: str) -> str | None:
    """The `sandbox-pay` secret from the ledger's "name:secret,name:secret" setting.

    `make run` gives every child the same environment; reading the ledger's own setting keeps
    the secret off the command line (where `ps` would show it) without a second variable.
    """
    for entry in secrets_setting.split(","):
        name, _, secret = entry.strip().partition(":")
        if name == "sandbox-pay" and secret:
            return secret
    return None


def serve(provider: Provider) -> None:
    """Serve until SIGTERM or SIGINT, then stop cleanly (exit status 0)."""
    options = provider.options
    server = SandboxServer((options.host, options.port), provider)

    def stop(signum: int, frame: FrameType | None) -> None:
        # shutdown() waits for serve_forever() to return, which runs in this very thread;
        # calling it from another thread lets the loop notice and finish.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    provider.start()
    host, port = server.server_address[:2]
    print(f"sandbox {provider.name} listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        provider.stop()
        server.server_close()


def main(provider: type[Provider], argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog=f"python -m devstack.sandbox.{provider.name}",
        description=(provider.__doc__ or "").split("\n")[0],
    )
    add_arguments(parser, payments=provider.takes_async)
    values = vars(parser.parse_args(argv))
    try:
        options = options_from(values, provider)
    except ValueError as error:
        parser.error(str(error))
    serve(provider(options))
