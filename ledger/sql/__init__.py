"""The current definitions of the ledger's SQL functions and triggers, one file per rule.

A migration that changes a rule loads its file here (`statements`); older migrations keep the
literal text they ran, so that history stays fixed. When a rule changes again, the migration
that loaded the file before is given its text as a literal, and the new one loads the file.
"""

from __future__ import annotations

from pathlib import Path

import sqlparse

_HERE = Path(__file__).resolve().parent


def statements(name: str) -> list[str]:
    """The statements of `<name>.sql`, one string each (dollar-quoted bodies kept whole), for
    `migrations.RunSQL`: a prepared-statement cursor runs one statement at a time."""
    text = (_HERE / f"{name}.sql").read_text(encoding="utf-8")
    return [
        statement.strip()
        for statement in sqlparse.split(text)
        if sqlparse.format(statement, strip_comments=True).strip()
    ]
