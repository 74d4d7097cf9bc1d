"""The SQL functions in the migrated database are the ones `ledger/sql/*.sql` defines: the
files are the rules' current text, and no migration left an older body behind."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

SQL = Path(__file__).resolve().parent.parent / "ledger" / "sql"
_FUNCTION = re.compile(
    r"CREATE OR REPLACE FUNCTION (\w+)\((.*?)\)\s*RETURNS.*?\$\$(.*?)\$\$", re.S | re.I
)


def _defined() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(SQL.glob("*.sql")):
        for name, args, body in _FUNCTION.findall(path.read_text()):
            found.append((name, len([a for a in args.split(",") if a.strip()]), body))
    return found


def test_every_sql_file_defines_at_least_one_function():
    assert {name for name, _, _ in _defined()} >= {
        "ledger_covering_halt",
        "ledger_halt_for_claim",
        "ledger_effect_claim_halted",
        "ledger_agent_compensation_check",
    }


@pytest.mark.parametrize(("name", "arity", "body"), _defined(), ids=lambda v: str(v)[:40])
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
