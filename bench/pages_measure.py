"""The operator pages and their raw queries, requested in rounds through Django's test client:
server time, SQL time, CPU here and in PostgreSQL, and an untimed pass that counts queries."""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from bench.cpu import CLOCK_TICKS, machine_ticks, ticks_of
from bench.harness import sql_rows

PAGE_SIZE = 50  # reviews.queue.pages.PAGE_SIZE (and COUNT_CAP is 10,000: the LIMITs of RAW_QUEUE)
DEEP_PAGE = 50
REASON_FILTER = "reconciliation_inconclusive"
# The raw baseline runs in every fourth round: its medians need fewer samples, and the overview's
# would otherwise double the longest part of the run.
RAW_EVERY = 4


# --- The pages and their raw queries ---------------------------------------------------------


# The queue's shape (reviews.queue.pages.open_page): the page's ids picked from the review items
# alone, then those rows with their effects, agents and people; beside them how many items match,
# counted up to the cap. One round trip here, three queries for the page.
RAW_QUEUE = """
WITH page AS (
    SELECT r.id FROM reviews_reviewitem r
     WHERE r.resolved_at IS NULL {where}
     ORDER BY {order} LIMIT 51 OFFSET {offset}
), matching AS (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM reviews_reviewitem r WHERE r.resolved_at IS NULL {where} LIMIT 10001
    ) m
)
SELECT matching.n, r.id, r.effect_id, r.reason, r.opened_at, r.due_at, r.resolved_at, r.tool,
       r.run_id, e.effect_key, e.status, a.name, u.username, v.username
  FROM page
  JOIN reviews_reviewitem r ON r.id = page.id
  JOIN ledger_effect e ON e.id = r.effect_id
  LEFT JOIN ledger_agent a ON a.id = r.agent_id
  LEFT JOIN auth_user u ON u.id = r.assignee_id
  LEFT JOIN auth_user v ON v.id = r.resolved_by_id
 CROSS JOIN matching
 ORDER BY {order}
"""

# What the overview reads per request (its counts come from the summary a background thread
# refreshes): the oldest unresolved effect and the recent recovery activity.
RAW_OVERVIEW = """
SELECT (SELECT row(e.id, e.effect_key, e.status, e.tool, a.name, e.created_at)
          FROM ledger_effect e JOIN ledger_agent a ON a.id = e.agent_id
         WHERE e.status IN ('planned', 'dispatching', 'awaiting_confirmation', 'unknown',
                            'awaiting_approval')
         ORDER BY e.created_at LIMIT 1),
       (SELECT array_agg(v.*) FROM (
            SELECT id, effect_id, kind, actor, from_status, to_status, reason, created_at
              FROM ledger_effectevent
             WHERE kind = 'reconciliation' OR actor LIKE 'system:%'
             ORDER BY id DESC LIMIT 15) v)
"""


# The queue's exact-match search (`reviews.queue.pages.search_effects`): the effects one text
# names by any of the five columns (the id only when the text is a UUID), and their open items,
# in one round trip.
RAW_SEARCH = """
WITH found AS (
    SELECT id FROM ledger_effect
     WHERE idempotency_key = %(q)s OR provider_ref = %(q)s OR target = %(q)s OR run_id = %(q)s
        {by_id}
     LIMIT 1000
)
SELECT r.id, r.effect_id, r.reason, r.opened_at, r.due_at, e.effect_key, e.status, e.amount_minor
  FROM found JOIN reviews_reviewitem r ON r.effect_id = found.id AND r.resolved_at IS NULL
  JOIN ledger_effect e ON e.id = r.effect_id
 ORDER BY r.opened_at, r.id LIMIT 51
"""
# What is searched for, by kind: a column of effects that have an open item (the provider
# reference of any effect that has one: items are mostly on effects without).
SEARCHED = {
    "effect id": "SELECT e.id::text",
    "idempotency key": "SELECT e.idempotency_key",
    "run": "SELECT e.run_id",
    "target": "SELECT e.target",
}


def search_values(sample: list[str]) -> dict[str, list[str]]:
    """For each kind of search, texts that name effects of the sample (a provider reference:
    any effect's), in the sample's order."""
    values = {}
    for kind, select in SEARCHED.items():
        rows = sql_rows(
            f"{select} FROM ledger_effect e WHERE e.id = ANY(%s::uuid[])", [sample[:200]]
        )
        values[kind] = [str(r[0]) for r in rows if r[0]]
    refs = sql_rows(
        "SELECT provider_ref FROM ledger_effect WHERE provider_ref IS NOT NULL "
        "AND provider_ref <> '' LIMIT 200"
    )
    values["provider ref"] = [str(r[0]) for r in refs]
    return {kind: found for kind, found in values.items() if found}


def raw_queue(where: str = "", order: str = "r.opened_at, r.id", offset: int = 0) -> str:
    return RAW_QUEUE.format(where=where, order=order, offset=offset)


@dataclass
class PageKind:
    name: str
    goal: bool  # the goal applies (every page measured)
    path: Callable[[int], str]  # request number → path
    raw_sql: str
    raw_params: Callable[[int], Any]  # request number → parameters of the raw query
    headers: dict[str, str] = field(default_factory=dict)


def page_kinds(me_id: int, sample: list[str]) -> list[PageKind]:
    def fixed(path: str) -> Callable[[int], str]:
        return lambda _: path

    def none(_: int) -> None:
        return None

    return [
        PageKind("queue", True, fixed("/queue/"), raw_queue(), none),
        PageKind(
            f"queue ?page={DEEP_PAGE}",
            True,
            fixed(f"/queue/?page={DEEP_PAGE}"),
            raw_queue(offset=PAGE_SIZE * (DEEP_PAGE - 1)),
            none,
        ),
        PageKind(
            "queue ?tool=send_email",
            True,
            fixed("/queue/?tool=send_email"),
            raw_queue("AND r.tool = 'send_email'"),
            none,
        ),
        PageKind(
            f"queue ?reason={REASON_FILTER}",
            True,
            fixed(f"/queue/?reason={REASON_FILTER}"),
            raw_queue(f"AND r.reason = '{REASON_FILTER}'"),
            none,
        ),
        PageKind(
            "queue ?age=overdue",
            True,
            fixed("/queue/?age=overdue"),
            raw_queue("AND r.due_at < now()"),
            none,
        ),
        PageKind(
            "queue ?assignee=me",
            True,
            fixed("/queue/?assignee=me"),
            raw_queue("AND r.assignee_id = %(me)s"),
            lambda _: {"me": me_id},
        ),
        PageKind(
            "queue ?sort=due",
            True,
            fixed("/queue/?sort=due"),
            raw_queue(order="r.due_at, r.id"),
            none,
        ),
        PageKind(
            "queue htmx partial",
            True,
            fixed("/queue/"),
            raw_queue(),
            none,
            {"HX-Request": "true"},
        ),
        PageKind(
            "effect detail (in review)",
            True,
            lambda n: f"/effects/{sample[n % len(sample)]}/",
            "SELECT * FROM ledger_effectevent WHERE effect_id = %s ORDER BY id",
            lambda n: [sample[n % len(sample)]],
        ),
        PageKind("overview", True, fixed("/"), RAW_OVERVIEW, none),
        *(_search_kind(kind, texts) for kind, texts in search_values(sample).items()),
    ]


def _search_kind(kind: str, texts: list[str]) -> PageKind:
    return PageKind(
        f"queue ?q=<{kind}>",
        True,
        lambda n: f"/queue/?q={quote(texts[n % len(texts)])}",
        RAW_SEARCH.format(by_id="OR id = %(q)s::uuid" if kind == "effect id" else ""),
        lambda n: {"q": texts[n % len(texts)]},
    )


def detail_sample(size: int, seed: int) -> list[str]:
    """Effects with an open review item, a random sample in a random order."""
    ids = [
        str(r[0])
        for r in sql_rows(
            "SELECT effect_id FROM reviews_reviewitem WHERE resolved_at IS NULL ORDER BY id"
        )
    ]
    rng = random.Random(seed)
    return rng.sample(ids, min(size, len(ids)))


# --- Measuring -------------------------------------------------------------------------------


@dataclass
class Samples:
    page_ms: list[float] = field(default_factory=list)
    sql_ms: list[float] = field(default_factory=list)  # SQL waits inside each request
    raw_ms: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)  # this process's CPU per request
    pg_ticks: int = 0  # CPU ticks of the page's PostgreSQL backend, all measured requests
    bytes: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class SqlClock:
    """Wall time spent in SQL by this connection, through Django's execute wrapper."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        start = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - start


def raw_connection(url: str) -> Any:
    """psycopg with client-side binding and no prepared statements, as Django uses it."""
    import psycopg

    return psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor)


def request_once(client: Any, kind: PageKind, n: int) -> Any:
    return client.get(kind.path(n), headers=kind.headers)


@dataclass
class Machine:
    """How busy the machine was while measuring, and how much of it was this benchmark."""

    seconds: float = 0.0
    busy: float = 0.0  # fraction of all CPUs
    ours: float = 0.0  # this process and the two PostgreSQL backends it talks to


def measure(
    kinds: list[PageKind], client: Any, raw: Any, warmup: int, requests: int
) -> tuple[dict[str, Samples], Machine]:
    """Rounds in which every kind takes one turn: the page, then (every `RAW_EVERY` rounds) its
    raw query. Besides wall time, the CPU each request cost this process and its PostgreSQL
    backend: on a machine shared with other work those are steadier than wall time."""
    from django.db import connection

    samples = {k.name: Samples() for k in kinds}
    clock = SqlClock()
    backend = sql_rows("SELECT pg_backend_pid()")[0][0]
    raw_backend = raw.info.backend_pid
    total = warmup + requests
    started = time.perf_counter()
    machine = Machine()
    with connection.execute_wrapper(clock), raw.cursor() as cursor:
        for n in range(total):
            if n == warmup:
                before = (
                    time.perf_counter(),
                    machine_ticks(),
                    time.process_time(),
                    ticks_of(backend) + ticks_of(raw_backend),
                )
            for kind in kinds:
                clock.seconds = 0.0
                pg_before = ticks_of(backend)
                cpu_before = time.thread_time()
                start = time.perf_counter()
                response = request_once(client, kind, n)
                page = time.perf_counter() - start
                cpu = time.thread_time() - cpu_before
                pg = ticks_of(backend) - pg_before
                s = samples[kind.name]
                if response.status_code != 200:
                    s.errors.append(f"{kind.path(n)}: {response.status_code}")
                if n % RAW_EVERY == 0:
                    start = time.perf_counter()
                    cursor.execute(kind.raw_sql, kind.raw_params(n))
                    cursor.fetchall()
                    if n >= warmup:
                        s.raw_ms.append(1000 * (time.perf_counter() - start))
                if n < warmup:
                    continue
                s.page_ms.append(1000 * page)
                s.sql_ms.append(1000 * clock.seconds)
                s.cpu_ms.append(1000 * cpu)
                s.pg_ticks += pg
                s.bytes.append(len(response.content))
            if n + 1 == warmup:
                print(f"  warm-up done ({warmup} requests per kind)", flush=True)
            elif (n + 1 - warmup) % 50 == 0 and n >= warmup:
                print(
                    f"  round {n + 1 - warmup}/{requests} ({time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
    wall, (all_ticks, busy_ticks), cpu, pg = before
    all_after, busy_after = machine_ticks()
    machine.seconds = time.perf_counter() - wall
    machine.busy = (busy_after - busy_ticks) / max(all_after - all_ticks, 1)
    ours = time.process_time() - cpu
    ours += (ticks_of(backend) + ticks_of(raw_backend) - pg) / CLOCK_TICKS
    machine.ours = ours / (machine.seconds * (os.cpu_count() or 1))
    return samples, machine


# --- Pages polling in the background ---------------------------------------------------------


class Pollers:
    """Operators who keep the overview open while the pages are measured: each polls its panels
    (the htmx partial, as the page does every few seconds) from a thread of its own, with its
    own session and database connection, as a gunicorn worker's other threads would serve them
    beside the measured requests. Their polls also keep the overview's summary refreshing."""

    def __init__(self, count: int, every: float, user: Any) -> None:
        self.count, self.every, self.user = count, every, user
        self.ms: list[float] = []
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._poll, args=(i * every / max(count, 1),), daemon=True)
            for i in range(count)
        ]

    def __enter__(self) -> Pollers:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _poll(self, offset: float) -> None:
        from django.db import connections
        from django.test import Client

        client = Client()
        client.force_login(self.user)
        try:
            stopped = self._stop.wait(offset)
            while not stopped:
                start = time.perf_counter()
                response = client.get("/", headers={"HX-Request": "true"})
                ms = 1000 * (time.perf_counter() - start)
                with self._lock:
                    self.ms.append(ms)
                    self.errors += response.status_code != 200
                stopped = self._stop.wait(self.every)
        finally:
            connections.close_all()


@dataclass
class Captured:
    queries: list[int]  # per request
    slowest: list[tuple[float, str]]  # (ms, SQL) of the slowest queries of the slowest request
    items: str  # what the queue page says it matched, or ""
    rows: int  # table rows rendered


_ITEMS = re.compile(rb"(\d+) items?\.")


def capture(kinds: list[PageKind], client: Any, requests: int = 3) -> dict[str, Captured]:
    """Untimed: each page's queries (count and the slowest), and what it showed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    result = {}
    for kind in kinds:
        counts: list[int] = []
        worst: list[tuple[float, str]] = []
        worst_total = -1.0
        content = b""
        for n in range(requests):
            with CaptureQueriesContext(connection) as context:
                response = request_once(client, kind, n)
            content = response.content
            timed = [(1000 * float(q["time"]), q["sql"]) for q in context.captured_queries]
            counts.append(len(timed))
            total = sum(ms for ms, _ in timed)
            if total > worst_total:
                worst_total, worst = total, sorted(timed, reverse=True)[:3]
        match = _ITEMS.search(content)
        result[kind.name] = Captured(
            queries=counts,
            slowest=worst,
            items=match.group(1).decode() if match else "",
            rows=content.count(b'<tr id="item-') + content.count(b'<tr class="event-'),
        )
    return result


def explain(sql: str) -> list[str]:
    return [r[0] for r in sql_rows(f"EXPLAIN (ANALYZE, BUFFERS) {sql}")]
