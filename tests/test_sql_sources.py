"""The SQL rules in the migrated database are the ones `ledger/sql/*.sql` defines: the files
are the rules' current text, every function and trigger the migrations made (besides the
ones django-pgtrigger keeps from the models) has one, and no migration left an older body or
signature behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

SQL = Path(__file__).resolve().parent.parent / "ledger" / "sql"
_FUNCTION = re.compile(
    r"CREATE OR REPLACE FUNCTION (\w+)\((.*?)\)\s*RETURNS.*?\$\$(.*?)\$\$", re.S | re.I
)
_TRIGGER = re.compile(r"^CREATE TRIGGER (\w+) .*? ON (\w+) ", re.M | re.I)


def _text() -> str:
    return "\n".join(path.read_text() for path in sorted(SQL.glob("*.sql")))


def _functions() -> list[tuple[str, int, str]]:
    found = []
    for name, args, body in _FUNCTION.findall(_text()):
        ins = [a for a in args.split(",") if a.strip() and not a.strip().upper().startswith("OUT ")]
        found.append((name, len(ins), body))
    return found


def _database(sql: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {row[0] for row in cursor.fetchall()}


def test_every_rule_the_migrations_made_has_its_file(db):
    functions = _database(
        "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = current_schema() AND p.proname NOT LIKE '%pgtrigger%'"
    )
    triggers = _database(
        "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname NOT LIKE 'pgtrigger%'"
    )
    assert functions == {name for name, _, _ in _functions()}
    assert triggers == {name for name, _ in _TRIGGER.findall(_text())}


@pytest.mark.parametrize(("name", "arity", "body"), _functions(), ids=lambda v: str(v)[:40])
def test_the_migrated_function_is_the_files(db, name, arity, body):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT prosrc FROM pg_proc WHERE proname = %s AND pronargs = %s", [name, arity]
        )
        rows = cursor.fetchall()
        # An older signature of the same rule must not linger beside it.
        cursor.execute("SELECT count(*) FROM pg_proc WHERE proname = %s", [name])
        overloads = cursor.fetchone()[0]
    assert [r[0] for r in rows] == [body]
    assert overloads == 1


def test_the_migrated_trigger_is_the_files(db):
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tgname, pg_get_triggerdef(oid, true) FROM pg_trigger "
            "WHERE NOT tgisinternal AND tgname NOT LIKE 'pgtrigger%'"
        )
        defined = dict(cursor.fetchall())
    text = _text()
    for name, definition in defined.items():
        assert f"{definition};" in text, f"trigger {name} differs from its file"
