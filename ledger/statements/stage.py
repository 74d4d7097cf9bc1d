"""Staging a statement: all or nothing, in one transaction.

**One import of a tool at a time.** Staging takes the tool's lock (`lock_tool`: a
transaction-level advisory lock keyed by the tool's name; applying takes it too, for every
batch) and stages nothing while another import of the tool is unfinished: it raises `Behind`
naming that import, which the caller finishes first (`ledger.statements.import_statement`).
So two imports of one tool at the same moment are staged and applied one after the other, and
give exactly what the same two run one after the other give: no import's lines are judged
while another's are only partly applied, and no move of one is lost to the other.

The file is streamed through the parser into a temporary table with COPY (never held in
memory whole); a fault anywhere rolls back the import row and every line. Then, still in the
same transaction:

- **Revision.** Where earlier imports of the tool overlap the period, their current lines
  inside it are diffed against the file's by (provider_ref, type, n-th of that pair): a line
  that is the same in both is not stored again (it was applied already); a line whose values
  changed replaces the old one (`revised`); an old line the file no longer has is `removed`
  (the removals phase opens `statement_line_removed` on its effect).
- **Matching by reference.** Each stored line names the effect its reference names, by
  idempotency key or id (the tool's `statement_reference`), whatever the effect's period:
  charges, captures, reversals and fees the tool's own effects; refunds the compensation
  effects of the tool's `compensated_by` tool (or of the tool itself).
"""

from __future__ import annotations

from datetime import datetime
from typing import IO, Any

from django.db import connection, transaction

from ledger.models import LineType, StatementImport, StatementLine, Tool
from ledger.models.statements import Origin, Phase
from ledger.policy.redaction import excerpt, scrub_cards
from ledger.statements import formats
from ledger.statements.parse import (
    STAGE_COLUMNS,
    HashingReader,
    LineReader,
    Period,
    StatementError,
    file_format,
    rows,
)

_LINES = StatementLine._meta.db_table
_IMPORTS = StatementImport._meta.db_table
# Lines in a file from which the lines table's statistics are refreshed as it is staged.
_ANALYZE_AFTER = 10_000
# Memory for staging's joins and sorts, in this transaction only (PostgreSQL's, not ours).
STAGING_WORK_MEM = "256MB"
_UUID = "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
# A file name is stored and shown with its card numbers tokenized; this long at most, so that
# it still fits its column (500) once they are.
_LONGEST_FILENAME = 255


class Behind(Exception):
    """Another import of the tool is unfinished (`import_id`): it is finished first."""

    def __init__(self, import_id: int) -> None:
        super().__init__(f"statement import {import_id} of the tool is unfinished")
        self.import_id = import_id


def lock_tool(cursor: Any, tool_name: str) -> None:
    """The tool's statement lock, until the transaction ends: staging and every batch of
    applying hold it, so one tool's imports never stage or apply at the same time. Its key is
    a 64-bit hash of "ledger.statements:<tool>", apart from the fixed keys of the halts (ADR
    0004) and the sealer, which are small numbers."""
    cursor.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
        [f"ledger.statements:{tool_name}"],
    )


def check_request(
    tool_name: str, filename: str, period_start: datetime, period_end: datetime
) -> Tool:
    """The tool, once the request itself is sound (before a byte of the file is read)."""
    tool = Tool.objects.filter(name=tool_name).first()
    if tool is None:
        raise StatementError(f"No tool is named {excerpt(tool_name)}.")
    if not tool.statements:
        raise StatementError(f"Tool {tool_name!r} does not declare statements = true.")
    if tool.amount_unit not in ("major", "minor"):
        raise StatementError(f"Tool {tool_name!r} declares no amount_unit (major or minor).")
    if tool.statement_format and formats.named(tool.statement_format) is None:
        raise StatementError(
            f"Tool {tool_name!r} reads statements as {tool.statement_format!r}, a format no "
            "installed provider adapter knows."
        )
    if len(filename) > _LONGEST_FILENAME:
        raise StatementError(f"The file name is longer than {_LONGEST_FILENAME} characters.")
    file_format(filename)
    for name, moment in (("period_start", period_start), ("period_end", period_end)):
        if moment.tzinfo is None:
            raise StatementError(f"{name} {moment.isoformat()} has no UTC offset.")
    if period_end <= period_start:
        raise StatementError(
            f"period_end {period_end.isoformat()} is not after period_start "
            f"{period_start.isoformat()}."
        )
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        now = cursor.fetchone()[0]
    if period_end > now:
        raise StatementError(
            f"The period ends in the future ({period_end.isoformat()}); a statement covers a "
            "period that is over."
        )
    return tool


def stage(
    tool: Tool,
    source: IO[bytes],
    *,
    filename: str,
    period_start: datetime,
    period_end: datetime,
    provisional: bool,
    by: str,
    origin: str,
    passing: frozenset[int] = frozenset(),
) -> StatementImport:
    """The import row with its lines stored and matched, or `StatementError` and nothing.
    `Behind` (before a byte is read) while another import of the tool is unfinished, other
    than those in `passing` (imports that could not be finished: they are left to `resume`)."""
    fmt = file_format(filename)
    report = formats.named(tool.statement_format)
    reader = LineReader(
        tool, Period(period_start, period_end), amount_unit=report.amount_unit if report else ""
    )
    hashing = HashingReader(source)
    with transaction.atomic():
        _first_in_line(tool, passing)
        made = StatementImport.objects.create(
            tool=tool.name,
            filename=scrub_cards(filename)[:500],
            sha256="",
            period_start=period_start,
            period_end=period_end,
            provisional=provisional,
            origin=origin,
            imported_by=by[:200],
        )
        stage_table = f"stm_stage_{made.pk}"
        with connection.cursor() as cursor:
            _open_stage(cursor, stage_table)
            raw = cursor.cursor
            with raw.copy(f"COPY {stage_table} ({STAGE_COLUMNS}) FROM STDIN") as copy:
                count = 0
                for row in rows(hashing, fmt, reader, report):
                    copy.write_row(row)
                    count += 1
            hashing.drain()
            counts: dict[str, Any] = {"lines": count, "sha256": hashing.sha256.hexdigest()}
            counts.update(_revise(cursor, made, stage_table))
            counts["lines_matched"] = _store(cursor, made, tool, stage_table)
            cursor.execute(f"DROP TABLE {stage_table}")
            if count >= _ANALYZE_AFTER:
                # Applying reads the lines by effect at once: without fresh statistics the
                # planner, which last saw the table small, would scan it for every effect.
                cursor.execute(f"ANALYZE {_LINES}")
        StatementImport.objects.filter(pk=made.pk).update(**counts)
    made.refresh_from_db()
    return made


def _first_in_line(tool: Tool, passing: frozenset[int]) -> None:
    """Take the tool's lock for the staging transaction; `Behind` while another import of the
    tool (other than those `passing`) is unfinished."""
    with connection.cursor() as cursor:
        lock_tool(cursor, tool.name)
    unfinished = (
        StatementImport.objects.filter(tool=tool.name)
        .exclude(phase=Phase.DONE)
        .exclude(pk__in=passing)
        .order_by("pk")
        .values_list("pk", flat=True)
        .first()
    )
    if unfinished is not None:
        raise Behind(unfinished)


def _open_stage(cursor: Any, stage_table: str) -> None:
    """The staging table for one file, in a transaction that holds the tool's lock (a revision
    is diffed against the lines staged before it, which no other import of the tool may be
    writing)."""
    # Matching joins and sorts a whole statement against the tool's effects at once: with the
    # default work_mem (4 MB) PostgreSQL spills its hashes and sorts to disk.
    cursor.execute(f"SET LOCAL work_mem = '{STAGING_WORK_MEM}'")
    # One statement over a million rows: compiling it (JIT) costs more than it saves.
    cursor.execute("SET LOCAL jit = off")
    cursor.execute(
        f"CREATE TEMP TABLE {stage_table} (line_no int, provider_ref text, "
        "reference text, type text, status text, amount_minor bigint, currency text, "
        "occurred_at timestamptz, keep boolean NOT NULL DEFAULT true) ON COMMIT DROP"
    )


def _revise(cursor: Any, made: StatementImport, stage_table: str) -> dict[str, Any]:
    """Diff the file against the current lines already imported for its period."""
    cursor.execute(
        f"SELECT id FROM {_IMPORTS} WHERE tool = %s AND id <> %s "
        "AND period_start < %s AND period_end > %s AND origin <> %s ORDER BY id",
        [made.tool, made.pk, made.period_end, made.period_start, Origin.SWEEP.value],
    )
    overlapping = [i for (i,) in cursor.fetchall()]
    if not overlapping:
        return {"lines_new": _count(cursor, stage_table)}
    _diff(cursor, made, stage_table, overlapping)
    cursor.execute(
        f"UPDATE {stage_table} s SET keep = false FROM {stage_table}_diff d "
        "WHERE d.new_line = s.line_no AND d.old_id IS NOT NULL AND d.same"
    )
    unchanged = cursor.rowcount
    cursor.execute(
        f"WITH gone AS (UPDATE {_LINES} l SET removed_by_id = %s, "
        "outcome = CASE WHEN d.new_line IS NULL THEN 'removed' ELSE 'revised' END "
        f"FROM {stage_table}_diff d WHERE l.id = d.old_id AND NOT coalesce(d.same, false) "
        "RETURNING d.new_line IS NULL AS removed) "
        "SELECT count(*) FILTER (WHERE removed), count(*) FILTER (WHERE NOT removed) FROM gone",
        [made.pk],
    )
    removed, changed = cursor.fetchone()
    cursor.execute(f"DROP TABLE {stage_table}_diff")
    return {
        "revises": overlapping,
        "lines_unchanged": unchanged,
        "lines_changed": changed,
        "lines_removed": removed,
        "lines_new": _count(cursor, stage_table) - changed,
    }


def _diff(cursor: Any, made: StatementImport, stage_table: str, overlapping: list[int]) -> None:
    """`<stage>_diff`: the current lines of the overlapping imports against the file's, each
    numbered within its (provider_ref, type) (partial captures of one authorization share a
    provider_ref), with whether the pair is the same line."""
    cursor.execute(
        f"""
        CREATE TEMP TABLE {stage_table}_diff ON COMMIT DROP AS
        WITH old AS (
            SELECT l.id, l.provider_ref, l.type, l.reference, l.status, l.amount_minor,
                   l.currency, l.occurred_at,
                   row_number() OVER (PARTITION BY l.provider_ref, l.type
                                      ORDER BY l.occurred_at, l.statement_id, l.line_no) AS n
              FROM {_LINES} l
             WHERE l.statement_id = ANY(%(overlapping)s) AND l.removed_by_id IS NULL
               AND l.occurred_at >= %(start)s AND l.occurred_at < %(end)s
        ), new AS (
            SELECT s.line_no, s.provider_ref, s.type, s.reference, s.status, s.amount_minor,
                   s.currency, s.occurred_at,
                   row_number() OVER (PARTITION BY s.provider_ref, s.type
                                      ORDER BY s.occurred_at, s.line_no) AS n
              FROM {stage_table} s
        )
        SELECT old.id AS old_id, new.line_no AS new_line,
               (old.reference, old.status, old.amount_minor, old.currency, old.occurred_at)
               IS NOT DISTINCT FROM
               (new.reference, new.status, new.amount_minor, new.currency, new.occurred_at)
               AS same
          FROM old FULL JOIN new
            ON old.provider_ref = new.provider_ref AND old.type = new.type AND old.n = new.n
        """,
        {"overlapping": overlapping, "start": made.period_start, "end": made.period_end},
    )


def _count(cursor: Any, stage_table: str) -> int:
    cursor.execute(f"SELECT count(*) FROM {stage_table} WHERE keep")
    return cursor.fetchone()[0]


def _store(cursor: Any, made: StatementImport, tool: Tool, stage_table: str) -> int:
    """Insert the lines to keep, each with the effect its reference names; how many name one.

    A line that only repeats what the ledger already holds (a successful charge, alone in the
    file for its reference, of an effect confirmed under the same provider ref and amount, with
    no other current line) is stored as `agrees` and not read again: applying looks only at
    the rest. Two joins, which the planner may hash: a statement is mostly lines of effects."""
    by_id = tool.statement_reference == "effect_id"
    key = (
        f"CASE WHEN s.reference ~ '{_UUID}' THEN s.reference::uuid END" if by_id else "s.reference"
    )
    column = "id" if by_id else "idempotency_key"
    refund_tools = sorted({tool.name, tool.compensated_by} - {""})
    cursor.execute(f"ANALYZE {stage_table}")
    cursor.execute(
        f"""
        WITH stored AS (
        INSERT INTO {_LINES} (statement_id, line_no, provider_ref, reference, type, status,
                              amount_minor, currency, occurred_at, effect_id, outcome)
        SELECT %(import)s, s.line_no, s.provider_ref, s.reference, s.type, s.status,
               s.amount_minor, s.currency, s.occurred_at, coalesce(a.id, c.id),
               CASE WHEN a.status = 'confirmed' AND a.provider_ref = s.provider_ref
                         AND s.type = %(charge)s AND s.status = 'succeeded'
                         AND (a.amount_minor IS NULL OR a.amount_minor = s.amount_minor)
                         AND (a.currency = '' OR a.currency = s.currency)
                         AND s.same_reference = 1
                         AND NOT EXISTS (SELECT 1 FROM {_LINES} o
                                          WHERE o.effect_id = a.id AND o.removed_by_id IS NULL)
                    THEN 'agrees' ELSE '' END
          FROM (SELECT t.*, count(*) OVER (PARTITION BY t.reference) AS same_reference
                  FROM {stage_table} t WHERE t.keep) s
          LEFT JOIN ledger_effect a
            ON s.type <> %(refund)s AND s.reference <> '' AND a.{column} = {key}
           AND a.tool = %(tool)s AND a.kind <> 'decision'
          LEFT JOIN ledger_effect c
            ON s.type = %(refund)s AND s.reference <> '' AND c.{column} = {key}
           AND c.tool = ANY(%(refund_tools)s) AND c.kind = 'compensation'
        RETURNING effect_id
        )
        SELECT count(effect_id) FROM stored
        """,
        {
            "import": made.pk,
            "charge": LineType.CHARGE.value,
            "refund": LineType.REFUND.value,
            "refund_tools": refund_tools,
            "tool": tool.name,
        },
    )
    return cursor.fetchone()[0]
