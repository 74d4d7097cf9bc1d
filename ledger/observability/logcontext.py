"""What a log line knows about the call it happened in: request id, agent, effect and run.

`RequestIdMiddleware` opens a fresh context for each request (taking the caller's
`X-Request-ID` when it is a sane token, else making one) and echoes the id in the response; the
API adds the agent when it authenticates and the effect and run as soon as it knows them
(`bind`). `ContextFilter` copies the context onto every record, so any logger's lines carry it.

A context variable, not a thread-local: gunicorn's gthread workers reuse threads, and each
request resets the variable to what it was, so nothing leaks from one request into the next.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.http import HttpRequest, HttpResponse

from ledger.observability import apimetrics
from ledger.observability.jsonlog import scrub

FIELDS = ("request_id", "agent", "effect_id", "run_id")
# One line per API call with its status and duration; pages and static files are not logged.
# The same calls are timed for /metrics (`apimetrics`).
requests_log = logging.getLogger("ledger.requests")
API_PREFIX = "/api/"
HEADER = "X-Request-ID"
# A caller's id goes into every log line of its request: only a plain token is taken, so a
# header cannot forge log lines or smuggle anything long into them.
_SANE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")

_context: ContextVar[dict[str, str] | None] = ContextVar("ledger_log_context", default=None)


def current() -> dict[str, str]:
    return dict(_context.get() or {})


def bind(**values: Any) -> None:
    """Add to the current context (a request's, or one opened with `scope`); a no-op outside
    one, so library code may call it freely."""
    context = _context.get()
    if context is not None:
        context.update({name: str(value) for name, value in values.items() if value is not None})


@contextmanager
def scope(**values: Any) -> Iterator[dict[str, str]]:
    """A fresh context for one unit of work (a request, a job), restored afterwards."""
    context = {name: str(value) for name, value in values.items() if value is not None}
    token = _context.set(context)
    try:
        yield context
    finally:
        _context.reset(token)


def request_id_from(request: HttpRequest) -> str:
    offered = request.headers.get(HEADER, "")
    return offered if _SANE_ID.fullmatch(offered) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Outermost: every response, errors from inner middleware included, carries the id."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        started = time.monotonic()
        with scope(request_id=request_id_from(request)) as context:
            request.request_id = context["request_id"]  # type: ignore[attr-defined]
            response = self.get_response(request)
            if request.path.startswith(API_PREFIX):
                seconds = time.monotonic() - started
                apimetrics.observe(request, response.status_code, seconds)
                # The path can hold an agent's run id, which is free text: scrubbed here, so
                # the message itself is clean whatever formatter writes it.
                requests_log.info(
                    "%s %s %s",
                    request.method,
                    scrub(request.path),
                    response.status_code,
                    extra={
                        "status": response.status_code,
                        "duration_ms": round(seconds * 1000, 1),
                    },
                )
        response[HEADER] = context["request_id"]
        return response

    def process_view(
        self,
        request: HttpRequest,
        view: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        # The API's paths name the effect or the run (`/effects/{effect_id}/…`,
        # `/runs/{run_id}/journal`): known before the view runs, so its lines carry them too.
        # Unvalidated text from the URL yet, so scrubbed like the path.
        bind(**{
            name: scrub(str(kwargs[name])[:200])
            for name in ("effect_id", "run_id")
            if kwargs.get(name) is not None
        })  # fmt: skip


class ContextFilter(logging.Filter):
    """Puts the context's fields on each record (empty strings where unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = _context.get() or {}
        for name in FIELDS:
            if not hasattr(record, name):
                setattr(record, name, context.get(name, ""))
        return True
