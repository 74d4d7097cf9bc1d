"""What a process remembers between requests (agent keys, tool policies), and when to forget it.

One row, `ConfigVersion`, holds the configuration version; PostgreSQL triggers move it in every
transaction that changes a tool, an API key or an agent's `is_active` (migration 0007), so a
change made by raw SQL or by another process moves it too. Each remembered value is tagged with
the version it was read under and is used only while the version this process last read is
still that one.

The version is read in the same query that authenticates an agent's key
(`ledger.policy.agentkeys`), so the agent API's hot path has no round trip of its own for it; other
processes (rq workers, the pages) read it on its own when their copy is older than
`STALE_AFTER`. This process's own changes through the ORM expire its copy at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Generic, TypeVar

from django.db import connection
from django.db.models.signals import post_delete, post_save

from ledger.models import Agent, ApiKey, ConfigVersion, Tool

# A process that has not read the version for this long reads it before trusting what it
# remembers. The agent API re-reads it sooner, with the key (`agentkeys.RECHECK_SECONDS`), so
# that a request's own policy lookups, shortly after its authentication, never need a query.
STALE_AFTER = 0.5

# SQL: the current version; 0 while the row is missing (a test database's flush removes it).
VERSION_SQL = f"COALESCE((SELECT version FROM {ConfigVersion._meta.db_table} WHERE id = 1), 0)"


@dataclass(frozen=True)
class _Seen:
    version: int
    at: float  # time.monotonic() of the read


# One frozen object, replaced whole: threads of a gthread worker read it without a lock.
_seen: _Seen | None = None


def observe(version: int) -> None:
    """Record a version just read from the database (alone or with a key)."""
    global _seen
    _seen = _Seen(version, time.monotonic())


def seen_within(max_age: float) -> int | None:
    """The version read at most `max_age` seconds ago, or None."""
    seen = _seen
    if seen is not None and time.monotonic() - seen.at <= max_age:
        return seen.version
    return None


def current(max_age: float | None = None) -> int:
    """The version, read from the database when this process's copy is older than `max_age`
    (STALE_AFTER, read at the call)."""
    version = seen_within(STALE_AFTER if max_age is None else max_age)
    if version is None:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {VERSION_SQL}")
            version = int(cursor.fetchone()[0])
        observe(version)
    return version


def expire(**kwargs: object) -> None:
    """This process changed a tool, key or agent: its next lookup reads the version again, so
    it sees its own change at once (others see it through the trigger's version)."""
    global _seen
    _seen = None


V = TypeVar("V")


class VersionedCache(Generic[V]):
    """Values tagged with the version they were read under; another version is a miss.

    Each entry carries its own tag, so a thread that read under an old version and stores
    late cannot make its value pass for the new version's."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, V]] = {}
        self._version: int | None = None

    def get(self, key: str, version: int) -> V | None:
        entry = self._entries.get(key)
        return entry[1] if entry is not None and entry[0] == version else None

    def put(self, key: str, version: int, value: V) -> None:
        if version != self._version:
            # The version moved: what was kept under the old one is of no further use.
            self._entries = {}
            self._version = version
        self._entries[key] = (version, value)

    def evict(self, key: str) -> None:
        self._entries.pop(key, None)  # one dict operation: atomic for gthread's threads


for _model in (Agent, ApiKey, Tool):
    post_save.connect(expire, sender=_model, dispatch_uid=f"configversion-{_model.__name__}")
    post_delete.connect(expire, sender=_model, dispatch_uid=f"configversion-{_model.__name__}-d")
