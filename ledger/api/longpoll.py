"""Long polls: wait for an effect's status to change without holding a database connection.

One thread per process (`Listener`) keeps its own psycopg connection, outside Django's and in
autocommit, listening on `ledger_effects` (the trigger of migration 0013 notifies it at the
commit of every status change) and wakes the waiters of the effect each notification names
(`Waiters`: a condition variable per effect id, all on one lock). A waiter

1. takes a place, at most `LEDGER_MAX_WAITERS` per process and at most its agent's share of
   them (`agent_share`), otherwise it is answered at once;
2. reads the effect: the status it waits to see change;
3. closes the request's database connection and waits on its condition, with no query;
4. on a notification for its effect, or at its deadline, reads the effect again.

Taking the place before the first read means a change that commits between the read and the
wait still wakes it. While the listener is not listening (starting, or reconnecting after an
error) notifications can be lost, so waiters then re-read once a second, and the listener wakes
them all once it listens again.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from psycopg import pq

from ledger.api.notifications import CHANNEL
from ledger.effects.agentcalls import Answer, answer, own_effect, read_own
from ledger.models import Agent, Effect

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.longpoll")

# The listener's connection is named so that it can be told apart in pg_stat_activity.
APPLICATION_NAME = "ledger-listen"
# While the listener is deaf, waiters re-read this often (seconds).
POLL_WHILE_DEAF = 1.0
RECONNECT_DELAY = 1.0
# How long notifies() blocks before the listener checks its connection and whether to stop.
LISTEN_SLICE = 1.0
# How long a first waiter lets a starting listener connect before falling back to polling.
START_WAIT = 2.0
# Told to a long poll that found every place taken (the Retry-After header, seconds).
RETRY_AFTER_SECONDS = 2


class Woke(Enum):
    CHANGED = "changed"  # a notification for this effect: its status changed
    RESYNC = "resync"  # notifications may have been lost: read again
    TIMEOUT = "timeout"


def agent_share(limit: int) -> int:
    """How many of a process's `limit` places one agent may hold: `LEDGER_WAITERS_PER_AGENT`,
    or by default half of them (at least one). Without a share, one agent's waiters could take
    every place, and every other agent's long polls would be answered at once."""
    share = settings.LEDGER_WAITERS_PER_AGENT or limit // 2
    return max(1, min(share, limit))


@dataclass
class _Watch:
    condition: threading.Condition
    changes: int = 0
    waiters: int = 0


class Ticket:
    """One waiter's place."""

    def __init__(self, waiters: Waiters, effect_id: str, owner: str, watch: _Watch) -> None:
        self._waiters, self.effect_id, self.owner, self._watch = waiters, effect_id, owner, watch
        self._changes, self._resyncs = watch.changes, waiters.resyncs

    def wait(self, timeout: float) -> Woke:
        watch = self._watch
        with watch.condition:
            watch.condition.wait_for(
                lambda: watch.changes != self._changes or self._waiters.resyncs != self._resyncs,
                max(timeout, 0.0),
            )
            if watch.changes != self._changes:
                self._changes = watch.changes
                return Woke.CHANGED
            if self._waiters.resyncs != self._resyncs:
                self._resyncs = self._waiters.resyncs
                return Woke.RESYNC
            return Woke.TIMEOUT

    def release(self) -> None:
        self._waiters.release(self)


class Waiters:
    """The process's waiters, by effect id, with one lock behind every condition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watches: dict[str, _Watch] = {}
        self._held: dict[str, int] = {}  # owner (an agent id) → places it holds
        self.count = 0
        self.resyncs = 0

    def admit(self, effect_id: str, owner: str, limit: int, share: int) -> Ticket | None:
        """A place for a waiter of `owner`'s, unless the process holds `limit` already or
        `owner` holds its `share`."""
        with self._lock:
            if self.count >= limit or self._held.get(owner, 0) >= share:
                return None
            watch = self._watches.get(effect_id)
            if watch is None:
                watch = self._watches[effect_id] = _Watch(threading.Condition(self._lock))
            watch.waiters += 1
            self.count += 1
            self._held[owner] = self._held.get(owner, 0) + 1
            return Ticket(self, effect_id, owner, watch)

    def release(self, ticket: Ticket) -> None:
        with self._lock:
            watch = self._watches[ticket.effect_id]
            watch.waiters -= 1
            self.count -= 1
            if not watch.waiters:
                del self._watches[ticket.effect_id]
            self._held[ticket.owner] -= 1
            if not self._held[ticket.owner]:
                del self._held[ticket.owner]

    def wake(self, effect_id: str) -> None:
        with self._lock:
            watch = self._watches.get(effect_id)
            if watch is not None:
                watch.changes += 1
                watch.condition.notify_all()

    def resync(self) -> None:
        with self._lock:
            self.resyncs += 1
            for watch in self._watches.values():
                watch.condition.notify_all()


_LIBPQ_KEYWORDS = frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())


def _listen_params() -> dict[str, Any]:
    """How to reach the database Django uses (in tests: the test database), or
    `LEDGER_LISTEN_URL` when set: LISTEN needs a session of its own, so behind a transaction
    pooler (PgBouncer) it must be a direct connection to PostgreSQL."""
    if settings.LEDGER_LISTEN_URL:
        return {
            "conninfo": settings.LEDGER_LISTEN_URL,
            "connect_timeout": 3,
            "application_name": APPLICATION_NAME,
        }
    # Exactly what Django's backend connects with: NAME, USER, PASSWORD, HOST, PORT and every
    # OPTIONS entry (a socket directory arrives as OPTIONS["host"] with HOST empty, as
    # `make run` gives it). Fields picked by hand miss such an entry, and the listener would
    # then offer the ledger's credentials to whatever server owns the default socket.
    given = connection.get_connection_params()
    # Less what only Django's own connections use (its cursor class, adapters, prepare
    # threshold): the rest are libpq's connection settings.
    params = {name: value for name, value in given.items() if name in _LIBPQ_KEYWORDS}
    params.setdefault("connect_timeout", 3)
    params["application_name"] = APPLICATION_NAME
    return params


class Listener(threading.Thread):
    def __init__(self, waiters: Waiters, params: dict[str, Any]) -> None:
        super().__init__(name="ledger-listen", daemon=True)
        self.waiters, self.params = waiters, params
        self.listening = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self._listen()
            except Exception:
                # Whatever went wrong, this thread must keep going: waiters fall back to
                # re-reading while it reconnects, and are told to read again once it listens.
                log.exception("long-poll listener lost its connection; reconnecting")
            self.listening.clear()
            self.waiters.resync()
            self.stopping.wait(RECONNECT_DELAY)

    def _listen(self) -> None:
        with psycopg.connect(**self.params, autocommit=True) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.listening.set()
            # Changes that committed while nobody listened: every waiter reads again.
            self.waiters.resync()
            while not self.stopping.is_set():
                for note in conn.notifies(timeout=LISTEN_SLICE):
                    self.waiters.wake(note.payload)
                conn.execute("SELECT 1")  # a dead connection shows here, not never


_started: tuple[int, Waiters, Listener] | None = None
_start_lock = threading.Lock()


def process_waiters() -> tuple[Waiters, Listener]:
    """This process's waiters and its one listener, started on first use (after any fork)."""
    global _started
    with _start_lock:
        if _started is None or _started[0] != os.getpid() or not _started[2].is_alive():
            waiters = Waiters()
            listener = Listener(waiters, _listen_params())
            listener.start()
            _started = (os.getpid(), waiters, listener)
        _, waiters, listener = _started
    listener.listening.wait(START_WAIT)
    return waiters, listener


def waiting_now() -> int:
    """How many long polls this process holds at the moment."""
    started = _started
    return started[1].count if started is not None and started[0] == os.getpid() else 0


def stop() -> None:
    """Stop this process's listener (tests: before the test database is dropped)."""
    global _started
    with _start_lock:
        started, _started = _started, None
    if started is not None:
        started[2].stopping.set()
        started[2].join(timeout=LISTEN_SLICE + 5)


def _let_go_of_connection() -> None:
    # Django keeps a request thread's connection open (CONN_MAX_AGE) until the request ends;
    # a waiter would hold one PostgreSQL backend for up to a minute. Closing it costs one
    # reconnect when the waiter reads again. Inside a transaction there is nothing to give back
    # (only tests wait so), and closing would end it.
    if not connection.in_atomic_block:
        connection.close()


def wait_for_change(
    effect_id: Any, seconds: float, read: Callable[[], Effect], *, owner: str
) -> Effect | None:
    """The effect as soon as its status changes, or as it is after `seconds`. None when every
    place is taken, or `owner`'s share of them (the asking agent's): the caller answers at
    once, with Retry-After. `read` raises for an effect the caller may not see; the place it
    held is then given back."""
    waiters, listener = process_waiters()
    limit = settings.LEDGER_MAX_WAITERS
    ticket = waiters.admit(str(effect_id), owner, limit, agent_share(limit))
    if ticket is None:
        return None
    try:
        effect = read()
        first = effect.status
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            _let_go_of_connection()
            deaf = not listener.listening.is_set()
            woke = ticket.wait(min(left, POLL_WHILE_DEAF) if deaf else left)
            if woke is Woke.TIMEOUT and not deaf:
                break
            effect = read()
            if woke is Woke.CHANGED or effect.status != first:
                return effect
        return read()
    finally:
        ticket.release()


def own_effect_after_change(agent: Agent, effect_id: Any, wait: int | None) -> tuple[Answer, bool]:
    """The caller's effect (`GET /effects/{id}`): at once, or with `wait` as soon as its status
    changes, or as it is after `wait` seconds. True beside it when every place to wait was
    taken: it is the effect as it is now, and the caller is told when to ask again
    (`RETRY_AFTER_SECONDS`)."""
    if wait is None:
        return read_own(agent, effect_id), False
    read = functools.partial(own_effect, agent, effect_id)
    effect = wait_for_change(effect_id, wait, read, owner=str(agent.id))
    if effect is None:
        return read_own(agent, effect_id), True
    return answer(effect), False
