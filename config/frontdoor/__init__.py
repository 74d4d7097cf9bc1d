"""The front door: a buffering HTTP/1.1 proxy in front of gunicorn.

    python -m config.frontdoor --bind HOST:PORT --upstream unix:PATH

gunicorn's gthread workers give each connection a thread while its request is read, so a few
clients sending their headers one byte at a time hold every thread and nobody else is
answered. This process reads each request, line, headers and body, under deadlines and size
limits, with asyncio (a waiting client costs a socket and a few kilobytes, no thread), and only
a complete request goes on to gunicorn, over kept-alive connections it reuses. Responses are
streamed back as gunicorn writes them (exports are long).

What it promises:
  * a request's line and headers must arrive within HEAD_TIMEOUT of its connection opening (a
    kept-alive connection: IDLE_TIMEOUT, waiting included), at most HEAD_LIMIT bytes (431);
  * a body within BODY_TIMEOUT plus one second per BODY_MIN_RATE bytes, at most MAX_BODY (413),
    and at most the agent API's own limit (LEDGER_MAX_BODY_BYTES) under /api/: refused here with
    the application's answer, since gunicorn refuses such a body before reading it and closes
    the connection under the write, which would lose its answer;
    a chunked body is decoded and passed on with a Content-Length; bodies past SPOOL_AT wait
    in a temporary file, not in memory;
  * gunicorn not accepting (a restart takes about two seconds) holds the request for up to
    UPSTREAM_WAIT, then answers 503 with Retry-After; nothing had reached gunicorn, so a
    client may repeat anything;
  * a connection to gunicorn that breaks after the request was sent is never retried for a
    write (the write may have committed): the client's connection is closed without an
    answer, exactly as when it talks to gunicorn directly and a worker dies. A GET or HEAD on
    a reused connection is tried once more on a fresh one.
  * the client's address reaches the application as X-Forwarded-For (whatever the client sent
    under that name is dropped); `config.wsgi` takes it as REMOTE_ADDR only for requests that
    came through a Unix socket, which is how this proxy reaches gunicorn.
"""

from __future__ import annotations

import os

HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 10.0
IDLE_TIMEOUT = 60.0
BODY_TIMEOUT = 30.0
BODY_MIN_RATE = 256 * 1024  # bytes per second a large body must at least average
MAX_BODY = 256 * 1024 * 1024  # the statement upload form takes 200 MiB
API_PREFIX = b"/api/"


def _api_body_limit() -> int:
    """LEDGER_MAX_BODY_BYTES as the application reads it (config.settings: 1 MiB, at least
    1024); a value the application would refuse at start leaves this process on the default,
    since the application then does not serve at all."""
    raw = os.environ.get("LEDGER_MAX_BODY_BYTES", "")
    return int(raw) if raw.isdigit() and int(raw) >= 1024 else 1024 * 1024


API_MAX_BODY = _api_body_limit()
SPOOL_AT = 1024 * 1024
UPSTREAM_WAIT = 10.0
UPSTREAM_IDLE = 15.0  # gunicorn keeps an idle connection UPSTREAM_KEEPALIVE s: no race at reuse
UPSTREAM_KEEPALIVE = 30
UPSTREAM_CONCURRENCY = 128
RESPONSE_TIMEOUT = 300.0  # between two reads of a response from gunicorn
POOL_SIZE = 64
MAX_CLIENTS = 4096
STOP_GRACE = 10.0
PIECE = 256 * 1024

CRLF = b"\r\n"
