"""`lifecycle.py --profile`: the ledger's hot path in-process (the WSGI application called
directly, one thread), and where its time goes: by phase, timed by wrappers with the PostgreSQL
waits of each phase, and by layer and function under cProfile."""

from __future__ import annotations

import contextlib
import cProfile
import io
import json
import os
import pstats
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from bench.harness import ROOT, bench_database, drop_quietly, setup_django
from bench.lifecycle_clients import check_intent, check_outcome, intent_body, outcome_body
from bench.lifecycle_load import BENCH_DB, Options, prepare_database

# Phases of a request, outermost first: (label, object, attribute). Each is timed by a wrapper
# (a clock read at entry and exit: negligible next to a request); a phase's own time excludes
# the phases nested in it, so the rows add up to the whole.
DJANGO = "Django: WSGI handler, middleware, URL routing"


NINJA = "ninja dispatch + view glue (atomic(), COMMIT, Intent)"


PHASES: list[tuple[str, str, str]] = [
    (NINJA, "ninja.operation:Operation", "run"),
    (
        "auth: API-key lookup (+ Django's health-check SELECT 1)",
        "ninja.operation:Operation",
        "_run_checks",
    ),
    ("input: JSON parse, checks, pydantic", "ninja.operation:Operation", "_get_values"),
    # A phase's functions are patched where the routes and services call them; a label may
    # name several (the policy is looked up by the intent's route and the outcome's service).
    ("view: tool policy lookup (policy_for)", "ledger.api.routes.effects", "policy_for"),
    ("view: tool policy lookup (policy_for)", "ledger.effects.agentcalls", "policy_for"),
    (
        "view: record_intent (key lookup, seq, insert, event)",
        "ledger.effects.intake",
        "record_intent",
    ),
    ("view: claim (dependency check, update, event)", "ledger.effects.transitions", "claim"),
    ("view: effect lookup (own_effect)", "ledger.effects.agentcalls", "own_effect"),
    ("view: record_outcome (update, event)", "ledger.effects.agentcalls", "record_outcome"),
    (
        "view: response dict + upstreams query (answer_dict)",
        "ledger.api.routes.effects",
        "answer_dict",
    ),
    (
        "view: response dict + upstreams query (answer_dict)",
        "ledger.effects.agentcalls",
        "upstream_of",
    ),
    (
        "output: pydantic response model + JSON render",
        "ninja.operation:Operation",
        "_result_to_response",
    ),
]


# Nested work worth its own row wherever it happens (redaction inside record_intent, …).
DETAILS: list[tuple[str, str, str]] = [
    ("  redaction (Redactor)", "ledger.policy.redaction:Redactor", "__call__"),
    ("  redaction (Redactor.text)", "ledger.policy.redaction:Redactor", "text"),
    ("  HMACs: request hash", "ledger.policy.digests", "request_hash"),
    ("  HMACs: value digest", "ledger.policy.digests", "value_digest"),
    ("  event digest (content_digest)", "ledger.policy.digests", "content_digest"),
]


class PhaseClock:
    """Exclusive wall time per phase, and the time each phase waited for PostgreSQL."""

    def __init__(self) -> None:
        self.own: dict[str, float] = {}
        self.db: dict[str, float] = {}
        self.round_trips = 0
        self.stack: list[str] = []

    def _add(self, table: dict[str, float], label: str, seconds: float) -> None:
        table[label] = table.get(label, 0.0) + seconds

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            parent = clock.stack[-1] if clock.stack else None
            clock.stack.append(label)
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - began
                clock.stack.pop()
                clock._add(clock.own, label, elapsed)
                if parent is not None:
                    clock._add(clock.own, parent, -elapsed)

        return timed

    def wrap_wait(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                clock.round_trips += 1
                clock._add(
                    clock.db,
                    clock.stack[-1] if clock.stack else DJANGO,
                    time.perf_counter() - began,
                )

        return timed


@contextlib.contextmanager
def patched(clock: PhaseClock) -> Iterator[None]:
    """Wrap the phase functions (and psycopg's round trips) for the duration."""
    import importlib

    import psycopg

    undo: list[tuple[Any, str, Any]] = []

    def patch(target: Any, attribute: str, replacement: Any) -> None:
        undo.append((target, attribute, target.__dict__[attribute]))
        setattr(target, attribute, replacement)

    try:
        for label, where, attribute in PHASES + DETAILS:
            module, _, cls = where.partition(":")
            target = importlib.import_module(module)
            if cls:
                target = getattr(target, cls)
            patch(target, attribute, clock.wrap(label, getattr(target, attribute)))
        patch(psycopg.Connection, "wait", clock.wrap_wait(psycopg.Connection.wait))
        yield
    finally:
        for target, attribute, original in reversed(undo):
            setattr(target, attribute, original)


# Layers of exclusive (self) time under cProfile, by where the code lives. First match wins.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("PostgreSQL round trips (psycopg: send, wait, parse)", ("/psycopg/", "psycopg")),
    ("Django DB backend (cursor wrappers, adaptation)", ("django/db/backends/", "django/db/utils")),
    ("Django ORM (query building, model instances)", ("django/db/",)),
    ("pydantic (validation, serialization)", ("pydantic",)),
    ("django-ninja (dispatch, auth, parsing glue)", ("/ninja/",)),
    ("redaction (ledger/policy/redaction.py incl. regex)", ("ledger/policy/redaction.py",)),
    ("HMACs and digests", ("ledger/policy/digests.py", "hmac.py", "_hashlib", "hashlib", "_sha2")),
    ("JSON encode/decode (jsonenc, json)", ("ledger/jsonenc.py", "/json/", "_json", "unicodedata")),
    ("ledger logic (other)", ("ledger/",)),
    (
        "Django request handling + middleware",
        ("/django/", "/axes/", "/csp/", "/whitenoise/", "django_htmx", "/asgiref/"),
    ),
]


OTHER_LAYER = "other (stdlib: uuid, datetime, re, threading …)"


def _layer_of(filename: str, funcname: str) -> str | None:
    text = filename if filename != "~" else funcname
    for label, needles in LAYERS:
        if any(n in text for n in needles):
            return label
    return None if filename == "~" else OTHER_LAYER


def _func_label(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    for marker in ("site-packages/", str(ROOT) + "/", "/lib/python"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{line}({name})"


class WsgiCaller:
    """Calls the ledger's WSGI application directly, as gunicorn would, minus the socket."""

    def __init__(self, app: Callable[..., Any], key: str) -> None:
        self.app = app
        self.authorization = f"Bearer {key}"
        self.run_id = f"profile-{uuid.uuid4().hex[:8]}"

    def serve(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        environ = {
            "REQUEST_METHOD": "POST",
            "PATH_INFO": path,
            "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": "8000",
            "HTTP_HOST": "127.0.0.1:8000",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "SCRIPT_NAME": "",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(body)),
            "HTTP_AUTHORIZATION": self.authorization,
            "wsgi.input": io.BytesIO(body),
            "wsgi.url_scheme": "http",
            "wsgi.errors": sys.stderr,
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
        }
        status: list[str] = []
        result = self.app(environ, lambda s, headers, exc_info=None: status.append(s))
        try:
            raw = b"".join(result)
        finally:
            result.close()  # request_finished: Django's connection housekeeping, as in gunicorn
        return int(status[0].split()[0]), json.loads(raw)

    def lifecycle(self, step: int) -> None:
        effect_id, token = check_intent(
            *self.serve("/api/v1/effects", intent_body(self.run_id, step, "profiler"))
        )
        check_outcome(*self.serve(f"/api/v1/effects/{effect_id}/outcome", outcome_body(token)))


def profile(opts: Options) -> int:
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit("DATABASE_URL is not set.")
    try:
        db = prepare_database(base_url)
        setup_django(db.env)
        from config.wsgi import application

        caller = WsgiCaller(application, db.ledger_key)
        n = opts.profile_lifecycles
        step = 0

        def run(count: int) -> tuple[float, float]:
            nonlocal step
            wall, cpu = time.perf_counter(), time.process_time()
            for _ in range(count):
                step += 1
                caller.lifecycle(step)
            return time.perf_counter() - wall, time.process_time() - cpu

        run(50)  # warm up: imports, connection, caches
        wall, cpu = run(n)
        print(
            f"Profile of the ledger's hot path: {n} lifecycles (POST /effects with claim + "
            "POST /outcome) in-process, the WSGI application called directly on one thread, "
            "PostgreSQL on this machine."
        )
        print(
            f"\nPlain run: {1000 * wall / n:.2f} ms per lifecycle ({n / wall:.0f}/s on one "
            f"thread), of which {1000 * cpu / n:.2f} ms CPU in this process."
        )

        # 1. Phases, timed by wrappers: no profiler distortion.
        clock = PhaseClock()
        caller.serve = clock.wrap(DJANGO, caller.serve)  # type: ignore[method-assign]
        with patched(clock):
            wall, _ = run(n)
        caller.serve = WsgiCaller.serve.__get__(caller)  # type: ignore[method-assign]
        print_phases(clock, wall, n)

        # 2. Layers and functions, under cProfile (which inflates Python time against I/O).
        profiler = cProfile.Profile()
        profiler.enable()
        run(n)
        profiler.disable()
        raw: dict[Any, Any] = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        total = sum(v[2] for v in raw.values())
        print(
            f"\nUnder cProfile ({1000 * total / n:.2f} ms per lifecycle: the profiler's own "
            "cost lands on Python code, so Python shares come out high):"
        )
        print_layers(raw, total, n)
        print_top(raw, n, by="cumulative")
        print_top(raw, n, by="self", limit=15)
    finally:
        with contextlib.suppress(Exception):
            from django.db import connections

            connections.close_all()
        if not opts.keep_db:
            drop_quietly(base_url, bench_database(base_url, BENCH_DB))
    return 0


def print_phases(clock: PhaseClock, wall: float, n: int) -> None:
    print(
        f"\nBy phase (wall time per lifecycle = 2 requests; {clock.round_trips / n:.0f} psycopg "
        "waits per lifecycle, each attributed to the phase that made it; the Python column is "
        "the rest, and it does not depend on how busy PostgreSQL is):"
    )
    print("      %   wall ms   PostgreSQL ms   Python ms   phase")
    total = sum(clock.own.values())
    labels = [DJANGO, *dict.fromkeys(label for label, _, _ in PHASES)]
    details = [label for label, _, _ in DETAILS]
    for label in labels + details:
        own = clock.own.get(label, 0.0)
        if label in details and not own:
            continue
        db = clock.db.get(label, 0.0)
        print(
            f"  {100 * own / total:5.1f}%  {1000 * own / n:8.2f}  {1000 * db / n:14.2f}  "
            f"{1000 * (own - db) / n:10.2f}   {label}"
        )
    waits = sum(clock.db.values())
    print(
        f"  {100.0:5.1f}%  {1000 * total / n:8.2f}  {1000 * waits / n:14.2f}  "
        f"{1000 * (total - waits) / n:10.2f}   total: {100 * waits / total:.0f}% waiting for "
        f"PostgreSQL, {100 * (1 - waits / total):.0f}% Python"
    )
    if abs(total - wall) > 0.05 * wall:
        print(f"  (the timed phases cover {100 * total / wall:.0f}% of the run's wall time)")


def print_layers(raw: dict[Any, Any], total: float, n: int) -> None:
    print("\nBy layer (exclusive time; C calls counted with their Python caller):")
    layers: dict[str, float] = {}
    for key, (_, _, self_time, _, callers) in raw.items():
        layer = _layer_of(key[0], key[2])
        if layer is not None:
            layers[layer] = layers.get(layer, 0.0) + self_time
            continue
        # A builtin with no telling name: its time belongs to whoever called it.
        for caller, edge in callers.items():
            caller_layer = _layer_of(caller[0], caller[2]) or OTHER_LAYER
            layers[caller_layer] = layers.get(caller_layer, 0.0) + edge[2]
    for label, seconds in sorted(layers.items(), key=lambda kv: -kv[1]):
        print(f"  {100 * seconds / total:5.1f}%  {1000 * seconds / n:6.2f} ms  {label}")


def print_top(raw: dict[Any, Any], n: int, *, by: str = "cumulative", limit: int = 25) -> None:
    print(f"\nTop {limit} functions by {by} time (per lifecycle):")
    print("   cum ms   self ms   calls  function")
    column = 3 if by == "cumulative" else 2
    ranked = sorted(raw.items(), key=lambda kv: -kv[1][column])
    shown = 0
    for key, (_, calls, self_time, cumulative, _) in ranked:
        label = _func_label(key)
        if label.startswith("bench/") or "_lsprof" in label:
            continue
        print(
            f"  {1000 * cumulative / n:7.2f}  {1000 * self_time / n:8.3f}  {calls / n:6.1f}  "
            f"{label}"
        )
        shown += 1
        if shown >= limit:
            break
