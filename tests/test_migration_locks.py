"""No ledger migration from 0015 on locks the effects or events tables beyond SHARE UPDATE
EXCLUSIVE, or holds more than one batch of their rows in a transaction.

Agents write an effect and an event in every call, so a migration that takes SHARE or a
stronger lock on either table (a plain CREATE INDEX, most ALTER TABLEs) stops the ledger for as
long as it runs; SHARE UPDATE EXCLUSIVE (CREATE INDEX CONCURRENTLY, VACUUM, ANALYZE) lets reads
and writes go on. Every ledger migration numbered `FIRST` or later is covered as soon as it
exists, including ones written after this test.

How: the test database is migrated to just before the migration, seeded with `ROW_BUDGET + 1`
effects with an event each, and the migration is then applied for real with an execute
wrapper around every SQL statement it sends — from its schema operations and its RunPython
code alike, since both go through Django's connection. Around each statement the wrapper reads
from `pg_locks` the locks this backend holds on the effects and events tables, their
partitions and their indexes, and from `pg_stat_xact_user_tables` how many of their rows the
transaction has updated or deleted (each such row stays locked against agents until commit).
A statement that runs outside a transaction (a non-atomic migration, RunPython without one)
is wrapped in BEGIN … COMMIT of its own, so its locks can be read before they are released; the
statements then commit, because the later statements of a migration build on the earlier
ones (a column, then its backfill). CREATE and DROP INDEX CONCURRENTLY cannot run in a
transaction block; they take SHARE UPDATE EXCLUSIVE by definition and are accepted by rule.

The migrations are checked in order, on one walk up the history (`walk`): the first check
migrates the database back to just before `FIRST`, and each check applies its migration where
the check before it left the database, which is just before it. Since the test migrates back,
migrations from `FIRST` on must be reversible (a RunPython needs a reverse; `RunPython.noop`
will do). Not seen: row locks taken without a write (SELECT … FOR UPDATE), and locks of
processes a migration starts. The negative cases at the end build bad migrations in the test
itself and check that each one is reported, naming the statement and the lock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pytest
from django.db import connection, migrations, models
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.state import ProjectState

from ledger.models import Effect, EffectEvent
from tests.fixtures.flush import emptier

FIRST = 15  # the first migration of the issue that introduced this guarantee
WATCHED = (Effect._meta.db_table, EffectEvent._meta.db_table)
LIMIT = "ShareUpdateExclusiveLock"
# PostgreSQL's table lock modes, weakest first.
MODES = (
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
)
# Effect or event rows one transaction of a migration may update or delete (and so keep locked
# against agents until it commits): one batch of a backfill.
ROW_BUDGET = 1000
CONCURRENT = re.compile(r"\s*(CREATE\s+(UNIQUE\s+)?|DROP\s+)INDEX\s+CONCURRENTLY\b", re.I)
# Statements that change only the catalogue: a column with no default or a constant one (no
# row is rewritten), a trigger. They take ACCESS EXCLUSIVE or SHARE ROW EXCLUSIVE for an
# instant, which is harmless unless they queue behind a long transaction with every agent
# queued behind them: so they are accepted only under a lock_timeout of at most
# `CATALOGUE_WAIT` seconds (the migration fails fast and is run again). django-pgtrigger installs
# a trigger as one statement that (re)defines its functions and then creates the trigger: that
# statement starts with its helper function's name.
CATALOGUE_ONLY = re.compile(
    r"\s*(ALTER\s+TABLE\s+\S+\s+ADD\s+COLUMN\s+\S+\s+[^;]*?(DEFAULT\s+('[^']*'|[\w.-]+)\s+)?"
    r"(NOT\s+)?NULL\s*;?\s*$|CREATE\s+TRIGGER\b|DROP\s+TRIGGER\b"
    r'|CREATE\s+OR\s+REPLACE\s+FUNCTION\s+"\w+"\._pgtrigger_should_ignore\b)',
    re.I,
)
CATALOGUE_WAIT = 5.0
# Partitioning the events table (0030, ADR 0016): its statements that create, attach or swap
# in a table of the events, take the live one for the swap, or drop the one swapped out. They
# take ACCESS EXCLUSIVE on the events table, or a strong lock on the effects for the foreign
# key of a partition created empty or dropped, but read and write no rows (the copy runs
# before, in batches; ATTACH skips its scan after a pre-validated CHECK): so they are accepted
# only under a lock_timeout of at most `PARTITIONING_WAIT` seconds (the migration retries).
PARTITIONING = re.compile(
    r"\s*(CREATE\s+TABLE\s+ledger_effectevent_\w+\s+"
    r"(PARTITION\s+OF\s+ledger_effectevent_p\s|\(.*\)\s*PARTITION\s+BY\s+RANGE\b)"
    r"|ALTER\s+TABLE\s+ledger_effectevent\w*\s+"
    r"(ATTACH\s+PARTITION|RENAME\s+TO)\s+ledger_effectevent_?\w*\s*$"
    r"|LOCK\s+TABLE\s+ledger_effectevent\s+IN\s+ACCESS\s+EXCLUSIVE\s+MODE\s*$"
    r"|DROP\s+TABLE\s+ledger_effectevent_old\s*$)",
    re.I | re.S,
)
PARTITIONING_WAIT = 1.0

# The watched tables with their partitions; then this backend's granted locks on them or on
# their indexes, the names of those tables and indexes, and the rows this transaction has
# updated or deleted in them.
_WATCHED_SQL = """
    WITH RECURSIVE watched(oid) AS (
        SELECT to_regclass(name)::oid FROM unnest(%(tables)s::text[]) AS name
         WHERE to_regclass(name) IS NOT NULL
        UNION
        SELECT i.inhrelid FROM pg_inherits i JOIN watched w ON i.inhparent = w.oid
    )
"""
_LOCKS_SQL = f"""{_WATCHED_SQL}
    SELECT t.relname, c.relname, l.mode
      FROM pg_locks l
      JOIN pg_class c ON c.oid = l.relation
      LEFT JOIN pg_index x ON x.indexrelid = l.relation
      JOIN pg_class t ON t.oid = coalesce(x.indrelid, l.relation)
     WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted
       AND t.oid IN (SELECT oid FROM watched)
"""
_RELATIONS_SQL = f"""{_WATCHED_SQL}
    SELECT c.relname FROM pg_class c LEFT JOIN pg_index x ON x.indexrelid = c.oid
     WHERE coalesce(x.indrelid, c.oid) IN (SELECT oid FROM watched)
"""
_ROWS_SQL = f"""{_WATCHED_SQL}
    SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM pg_stat_xact_user_tables
     WHERE relid IN (SELECT oid FROM watched)
"""


class Held(NamedTuple):
    """What this backend holds at one moment: (table, relation, mode) locks, the watched
    tables' and indexes' names, and the rows its transaction updated or deleted in them."""

    locks: set[tuple[str, str, str]]
    relations: set[str]
    rows: int
    # The session's lock_timeout in seconds (0: none).
    lock_timeout: float = 0.0


def covered() -> list[str]:
    """The ledger migrations numbered FIRST or later, from the migration files."""
    names = MigrationLoader(None, ignore_no_migrations=True).disk_migrations
    return sorted(
        n for app, n in names if app == "ledger" and n[:4].isdigit() and int(n[:4]) >= FIRST
    )


# --- Recording what each statement holds -----------------------------------------------------


@dataclass
class LockRecorder:
    """An execute wrapper: what every statement of a migration holds on the watched tables."""

    findings: list[str] = field(default_factory=list)
    statements: int = 0

    def _inspect(self, raw: Any) -> Held:
        tables = {"tables": list(WATCHED)}
        raw.execute(_LOCKS_SQL, tables)
        locks = {tuple(row) for row in raw.fetchall()}
        raw.execute(_RELATIONS_SQL, tables)
        relations = {name for (name,) in raw.fetchall()}
        raw.execute(_ROWS_SQL, tables)
        rows = int(raw.fetchone()[0])
        raw.execute("SELECT extract(epoch FROM current_setting('lock_timeout')::interval)::float8")
        return Held(locks, relations, rows, float(raw.fetchone()[0]))

    def _judge(self, sql: str, before: Held, after: Held) -> None:
        text = " ".join(sql.split())[:240]
        if CATALOGUE_ONLY.match(sql) and 0 < after.lock_timeout <= CATALOGUE_WAIT:
            return
        if PARTITIONING.match(sql) and 0 < after.lock_timeout <= PARTITIONING_WAIT:
            return
        for table, relation, mode in sorted(after.locks - before.locks):
            # An index this statement created is seen by no one else until it commits.
            if MODES.index(mode) > MODES.index(LIMIT) and relation in before.relations:
                on = table if relation == table else f"{table} (index {relation})"
                self.findings.append(f"{text!r} takes {mode} on {on}")
        if before.rows <= ROW_BUDGET < after.rows:
            self.findings.append(
                f"{text!r} leaves {after.rows} updated or deleted rows of "
                f"{' / '.join(WATCHED)} locked in one transaction (more than {ROW_BUDGET}): "
                "batch it"
            )

    def __call__(self, execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        self.statements += 1
        if CONCURRENT.match(sql):
            # SHARE UPDATE EXCLUSIVE by definition, and refused inside a transaction block.
            return execute(sql, params, many, context)
        db = context["connection"]
        # A cursor of its own, on the same session: the caller may still fetch its results.
        raw = db.connection.cursor()
        own = db.get_autocommit() and not db.in_atomic_block
        if own:
            raw.execute("BEGIN")
        try:
            before = self._inspect(raw)
            result = execute(sql, params, many, context)
            self._judge(sql, before, self._inspect(raw))
        except BaseException:
            if own:
                raw.execute("ROLLBACK")
            raise
        if own:
            raw.execute("COMMIT")
        return result

    def verdict(self, label: str) -> None:
        assert not self.findings, (
            f"{label} locks the effects or events tables beyond {LIMIT} or holds too many of "
            "their rows:\n  " + "\n  ".join(self.findings)
        )


@contextmanager
def recording() -> Iterator[LockRecorder]:
    recorder = LockRecorder()
    with connection.execute_wrapper(recorder):
        yield recorder


# --- The scratch database --------------------------------------------------------------------


def seed(state: ProjectState) -> None:
    """ROW_BUDGET + 1 effects with an event each, through the models of `state`, so that a
    migration touching them all in one transaction goes over the budget."""
    apps = state.apps
    agent = apps.get_model("ledger", "Agent").objects.create(name="migration-locks")
    Effect_ = apps.get_model("ledger", "Effect")
    effects = Effect_.objects.bulk_create(
        Effect_(
            agent=agent,
            effect_key=f"locks:{n}",
            run_id="locks",
            step_id=str(n),
            seq=n,
            tool="send_email",
            target="a@example.com",
            request={},
            request_hash="v1:seed",
            idempotency_key=f"seed-{n}",
            max_attempts=3,
        )
        for n in range(ROW_BUDGET + 1)
    )
    Event_ = apps.get_model("ledger", "EffectEvent")
    Event_.objects.bulk_create(
        Event_(effect=e, kind="intent", actor="seed", to_status="planned", digest="0" * 64)
        for e in effects
    )


def _to_the_end() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.fixture(scope="module")
def walk(django_db_blocker) -> Iterator[None]:
    """One walk up the history for the whole module, instead of a return to its end after
    every check and a walk back for the next (each walk back renders every migration's state).
    The test database is migrated to the end when the module is done (pass or fail), then
    emptied as after any transactional test, for the modules that follow."""
    yield
    with django_db_blocker.unblock():
        _to_the_end()
        emptier().full()


@pytest.fixture
def executor(walk) -> MigrationExecutor:
    """A migration executor on the test database, wherever the walk has left it."""
    return MigrationExecutor(connection)


@pytest.fixture
def at_the_end(walk) -> None:
    """The test database migrated to the end (a no-op unless the walk moved it)."""
    _to_the_end()


# --- The migrations of the issue and after ---------------------------------------------------


def test_the_migrations_of_the_issue_are_covered():
    assert {
        "0015_event_created_at_index",
        "0016_review_item_copies",
        "0017_provider_record",
        "0018_effect_amounts",
    } <= set(covered())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", covered())
def test_migration_locks_effects_and_events_no_more_than_share_update_exclusive(executor, name):
    key = ("ledger", name)
    parents = [p for p in executor.loader.graph.node_map[key].parents if p[0] == "ledger"]
    executor.migrate(parents)
    executor.loader.build_graph()
    state = executor.loader.project_state(key, at_end=False)
    seed(state)

    with recording() as recorder:
        executor.apply_migration(state, executor.loader.get_migration(*key))

    assert recorder.statements > 0
    recorder.verdict(name)


# --- The check fails on bad migrations -------------------------------------------------------


def _plain_index(state: ProjectState) -> migrations.AddIndex:
    index = models.Index(fields=["tool"], name="effect_locks_bad_idx")
    return migrations.AddIndex(model_name="effect", index=index)


def _longer_target(state: ProjectState) -> migrations.AlterField:
    target = state.models["ledger", "effect"].fields["target"].clone()
    target.max_length += 1
    return migrations.AlterField(model_name="effect", name="target", field=target)


def _new_column(state: ProjectState) -> migrations.AddField:
    return migrations.AddField(
        model_name="effect", name="locks_bad", field=models.IntegerField(null=True)
    )


def _under_lock_timeout(make: Callable) -> Callable:
    """`make`'s operation after a SET LOCAL lock_timeout, as a migration would write it."""
    timeout = "SET LOCAL lock_timeout = '3s'"
    return lambda state: [migrations.RunSQL(timeout, timeout), make(state)]


def _update_every_effect(apps: Any, schema_editor: Any) -> None:
    apps.get_model("ledger", "Effect").objects.update(checks=models.F("checks"))


_SWAP_LOCK = "LOCK TABLE ledger_effectevent IN ACCESS EXCLUSIVE MODE"


# Deliberately bad migrations, built on the current state: (the operation, what is reported).
BAD = {
    "plain AddIndex on effects": (
        _plain_index,
        r"'CREATE INDEX \"effect_locks_bad_idx\".*' takes ShareLock on ledger_effect(?! \(index)",
    ),
    "AlterField on effects": (
        _longer_target,
        r"'ALTER TABLE \"ledger_effect\" ALTER COLUMN \"target\" TYPE.*' takes "
        r"AccessExclusiveLock on ledger_effect",
    ),
    # A new column changes the catalogue only, but without a lock_timeout it may queue behind
    # a long transaction while every agent queues behind it.
    "AddField on effects without a lock_timeout": (
        _new_column,
        r"'ALTER TABLE \"ledger_effect\" ADD COLUMN \"locks_bad\".*' takes "
        r"AccessExclusiveLock on ledger_effect",
    ),
    # A lock_timeout excuses only catalogue changes: a type change rewrites the table.
    "AlterField on effects under a lock_timeout": (
        _under_lock_timeout(_longer_target),
        r"'ALTER TABLE \"ledger_effect\" ALTER COLUMN \"target\" TYPE.*' takes "
        r"AccessExclusiveLock on ledger_effect",
    ),
    # The partitioning allowance needs its lock_timeout of at most 1 s: the swap's statement
    # with none, or with a longer one, is reported like any other.
    "the events table's swap lock without a lock_timeout": (
        lambda state: migrations.RunSQL(_SWAP_LOCK, migrations.RunSQL.noop),
        r"'LOCK TABLE ledger_effectevent IN ACCESS EXCLUSIVE MODE' takes AccessExclusiveLock "
        r"on ledger_effectevent",
    ),
    "the events table's swap lock under a 3 s lock_timeout": (
        _under_lock_timeout(lambda state: migrations.RunSQL(_SWAP_LOCK, migrations.RunSQL.noop)),
        r"'LOCK TABLE ledger_effectevent IN ACCESS EXCLUSIVE MODE' takes AccessExclusiveLock "
        r"on ledger_effectevent",
    ),
    "RunPython updating every effect at once": (
        lambda state: migrations.RunPython(_update_every_effect, migrations.RunPython.noop),
        rf"'UPDATE \"ledger_effect\" SET \"checks\".*' leaves {ROW_BUDGET + 1} updated or "
        rf"deleted rows .* \(more than {ROW_BUDGET}\): batch it",
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", BAD)
def test_a_migration_that_locks_too_much_is_reported(at_the_end, case):
    make_operation, expected = BAD[case]
    executor = MigrationExecutor(connection)
    bad = migrations.Migration("9999_locks_too_much", "ledger")
    bad.dependencies = executor.loader.graph.leaf_nodes("ledger")
    state = executor.loader.project_state(bad.dependencies)
    made = make_operation(state)
    bad.operations = made if isinstance(made, list) else [made]
    seed(state)

    with recording() as recorder, connection.schema_editor(atomic=bad.atomic) as editor:
        bad.apply(state.clone(), editor)
    with connection.schema_editor(atomic=bad.atomic) as editor:
        bad.unapply(state.clone(), editor)

    with pytest.raises(AssertionError, match=expected) as failure:
        recorder.verdict(case)
    assert "locks the effects or events tables beyond ShareUpdateExclusiveLock" in str(
        failure.value
    )
