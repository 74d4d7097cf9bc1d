"""Auditor exports: effects, events and decisions as CSV or JSON Lines, streamed by PostgreSQL.

The filter is a django-filter `FilterSet` over the dataset's queryset; the filtered queryset is
compiled to one `SELECT` and wrapped in `COPY (…) TO STDOUT`, so PostgreSQL formats every row
and Python only passes bytes along: no model instance per row, memory independent of the row
count. Rows come in a stable order, (created_at, id).

The COPY runs in a transaction of its own, for an events export with `PLANNER_SETTINGS`: a date
range of events is then read in that order from `event_created_idx` (a small range may be
sorted instead) and each event finds its seal through the seal's unique index, so rows stream
as they are found, with no pass over the whole seal table and no sort of the events table.

CSV: JSON columns are JSON text. Cells of the text columns whose values come from agents or
people (agent, run_id, step_id, tool, target, provider_ref; an event's or a decision's actor
and reason) that start with `=`, `+`, `-`, `@` (or their full-width or small forms, also after
leading white space), a tab, a carriage return or a line feed get one leading apostrophe, so
that a spreadsheet shows them as text instead of running them as a formula (OWASP's advice).
A cell that starts with an apostrophe gets one too, which makes the rule reversible: drop one
leading apostrophe from any such cell to get the stored value back. Ids, numbers, timestamps,
statuses, digests and keys are never touched: none of them can start with those characters.
JSON Lines is exact and has no such prefix.

Every export is recorded (`AuditExport`) when it starts; its row count and `finished_at` are
written when the last byte has been handed on. A download the client abandoned keeps
`finished_at` NULL: that is the record that it was cut short.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import django_filters
from django import forms
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Expression, F, Func, JSONField, QuerySet, TextField
from django.db.models.functions import Now
from django.http import QueryDict

from ledger.models import AuditExport, Effect, EffectEvent
from ledger.models.states import Kind, Status
from ledger.policy.redaction import scrub_cards
from ledger.policy.teams import effects_q

DATASETS = ("effects", "events", "decisions")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson; charset=utf-8",
}
FORMATS = tuple(CONTENT_TYPES)

# Planner settings for the export's own transaction (`set_config(…, true)` is SET LOCAL), by
# dataset. An events export joins every event to its seal, a table as large as the events.
# With PostgreSQL's default random_page_cost (4, a spinning disk's price for every index
# lookup) the planner, from a few thousand events on, reads and hashes or merges the whole seal
# table and then sorts the result, spilling to disk, rather than read the date range in
# event_created_idx's order and look each seal up by its unique index. 1.1 is PostgreSQL's
# advice for SSDs and cached data; without hash and merge joins, every join of an events export
# (seal, effect, agent: all on unique keys) is an index lookup per row, whichever filter is
# used. The planner still chooses between the date index and a sort of a small range. Measured
# (bench/exports.py --days 12, 100,000 of 500,000 events): half the PostgreSQL CPU.
PLANNER_SETTINGS = {
    "events": "SELECT set_config('random_page_cost', '1.1', true), "
    "set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)",
}

# Bytes handed to the server per write: big enough that per-chunk costs vanish, small enough
# that memory stays flat.
CHUNK_BYTES = 128 * 1024

# How a column is written in CSV. TEXT cells are guarded against formula injection; JSON
# cells are JSON text (they start with { [ " a digit, a minus of a number, t, f or n, so no
# spreadsheet reads them as a formula); PLAIN cells are ids, numbers, timestamps, statuses and
# server-made keys.
TEXT, JSON, PLAIN = "text", "json", "plain"

Column = tuple[str, Expression, str]


class _JsonKey(Func):
    """`provenance -> 'before'` (`->>` with `as_text`), the key written into the SQL: no
    parameter, so the formula guard may repeat the expression."""

    def __init__(self, field: str, key: str, *, as_text: bool = False) -> None:
        if not key.isidentifier():
            raise ValueError(f"not a plain JSON key: {key!r}")
        operator = "->>" if as_text else "->"
        super().__init__(
            F(field),
            template=f"(%(expressions)s {operator} '{key}')",
            output_field=TextField() if as_text else JSONField(),
        )


class _FormulaGuard(Func):
    """One leading apostrophe on a text that a spreadsheet would take for a formula, and on a
    text that already starts with one (so the rule can be undone)."""

    # A trigger (ASCII, or the full-width and small forms spreadsheets also honour) as the first
    # character after any white space; or a tab, carriage return, line feed or apostrophe as
    # the very first one. PostgreSQL's regular expressions read the \u escapes themselves.
    _blank = r"[:space:]\u00a0\u2007\u202f\u3000"
    _trigger = r"-=+@\uff1d\uff0b\uff0d\uff20\ufe66\ufe62\ufe63"
    # Most cells start with a letter or a digit, which is none of those: the first character's
    # code (48-57: digits; 65-126: letters and [ \ ] ^ _ ` { | } ~) settles them without the
    # regular expression, which took about half the PostgreSQL CPU of a CSV export of events.
    template = (
        "CASE WHEN ascii(%(expressions)s) BETWEEN 65 AND 126 "
        "OR ascii(%(expressions)s) BETWEEN 48 AND 57 THEN %(expressions)s "
        f"WHEN %(expressions)s ~ '^[{_blank}]*[{_trigger}]' "
        "OR left(%(expressions)s, 1) IN (E'\\t', E'\\r', E'\\n', '''') "
        "THEN '''' || %(expressions)s ELSE %(expressions)s END"
    )
    output_field = TextField()

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        sql, params = super().as_sql(compiler, connection, **extra)
        # The template repeats the expression; parameters would be bound once.
        if params:
            raise ValueError("a guarded column must compile without parameters")
        return sql, params


def _effect_columns() -> list[Column]:
    return [
        ("id", F("id"), PLAIN),
        ("agent", F("agent__name"), TEXT),
        ("run_id", F("run_id"), TEXT),
        ("step_id", F("step_id"), TEXT),
        ("seq", F("seq"), PLAIN),
        ("kind", F("kind"), PLAIN),
        ("tool", F("tool"), TEXT),
        ("target", F("target"), TEXT),
        ("status", F("status"), PLAIN),
        ("attempt", F("attempt"), PLAIN),
        ("max_attempts", F("max_attempts"), PLAIN),
        ("idempotency_key", F("idempotency_key"), PLAIN),
        ("request_hash", F("request_hash"), PLAIN),
        ("provider_ref", F("provider_ref"), TEXT),
        ("parent_id", F("parent_id"), PLAIN),
        ("created_at", F("created_at"), PLAIN),
        ("updated_at", F("updated_at"), PLAIN),
        ("resolved_at", F("resolved_at"), PLAIN),
        ("request", F("request"), JSON),
        ("response", F("response"), JSON),
        ("error", F("error"), JSON),
        ("provenance", F("provenance"), JSON),
    ]


def _event_columns() -> list[Column]:
    return [
        ("id", F("id"), PLAIN),
        ("effect_id", F("effect_id"), PLAIN),
        ("kind", F("kind"), PLAIN),
        ("actor", F("actor"), TEXT),
        ("from_status", F("from_status"), PLAIN),
        ("to_status", F("to_status"), PLAIN),
        ("reason", F("reason"), TEXT),
        ("data", F("data"), JSON),
        ("digest", F("digest"), PLAIN),
        ("created_at", F("created_at"), PLAIN),
        # The event's link in the audit chain; empty while the sealer has not reached it.
        ("seal_seq", F("seal__seq"), PLAIN),
        ("seal_hash", F("seal__hash"), PLAIN),
    ]


def _decision_columns() -> list[Column]:
    # A decision is an effect of kind `decision` on its `parent`; its provenance holds who
    # decided, why, and the target's state before and after.
    first = [
        ("id", F("id"), PLAIN),
        ("parent_id", F("parent_id"), PLAIN),
        ("actor", _JsonKey("provenance", "actor", as_text=True), TEXT),
        ("reason", _JsonKey("provenance", "reason", as_text=True), TEXT),
        ("before", _JsonKey("provenance", "before"), JSON),
        ("after", _JsonKey("provenance", "after"), JSON),
        ("created_at", F("created_at"), PLAIN),
    ]
    named = {name for name, _, _ in first}
    return first + [column for column in _effect_columns() if column[0] not in named]


COLUMNS = {"effects": _effect_columns, "events": _event_columns, "decisions": _decision_columns}


def column_names(dataset: str) -> list[str]:
    return [name for name, _, _ in COLUMNS[dataset]()]


# --- The filter ------------------------------------------------------------------------------


class ExportForm(forms.Form):
    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and since >= until:
            raise ValidationError("“From” must be earlier than “Until”.")
        return cleaned


# A text input, not datetime-local: it shows back exactly what was typed when it is refused,
# and takes a bare date ("2026-01-31" is midnight UTC) as well as a time.
_WHEN_HELP = "YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS, UTC"


# Where each effect filter looks, from an effect; events reach their effect through `effect`,
# decisions the effect decided on through `parent` (a decision's own tool and status are always
# `operator_decision` and `confirmed`, so filtering on them would say nothing).
_EFFECT_PATHS = {"run_id": "run_id", "tool": "tool", "agent": "agent__name", "status": "status"}
_THROUGH = {"effects": "", "events": "effect__", "decisions": "parent__"}


def _rows_of(dataset: str) -> QuerySet:
    if dataset == "events":
        return EffectEvent.objects.all()
    if dataset == "decisions":
        return Effect.objects.filter(kind=Kind.DECISION)
    return Effect.objects.all()


class ExportFilter(django_filters.FilterSet):
    """The auditor's filter over one dataset. The date range applies to the rows' own
    `created_at` (an event's own time for events); run, tool, agent and status apply to the
    effect: an event's effect, the effect a decision decided on.
    """

    since = django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr="gte",
        label="From (inclusive)",
        help_text=_WHEN_HELP,
    )
    until = django_filters.DateTimeFilter(
        field_name="created_at",
        lookup_expr="lt",
        label="Until (exclusive)",
        help_text=_WHEN_HELP,
    )
    run_id = django_filters.CharFilter(method="on_effect", label="Run id", max_length=200)
    tool = django_filters.CharFilter(method="on_effect", label="Tool", max_length=100)
    agent = django_filters.CharFilter(method="on_effect", label="Agent", max_length=100)
    status = django_filters.ChoiceFilter(
        method="on_effect", label="Status", choices=Status.choices, empty_label="any"
    )

    class Meta:
        form = ExportForm

    def __init__(
        self,
        data: QueryDict | dict[str, str] | None,
        *,
        dataset: str,
        teams: frozenset[int] | None = None,
    ) -> None:
        """`teams`: the ids of the teams whose rows a scoped person may export (with the rows
        of no team, `ledger.policy.teams`); None for everything."""
        if dataset not in DATASETS:
            raise ValueError(f"unknown dataset {dataset!r}")
        self.dataset = dataset
        self.teams = teams
        rows = _rows_of(dataset)
        if teams is not None:
            rows = rows.filter(effects_q(teams, _THROUGH[dataset]))
        super().__init__(data, queryset=rows)

    def on_effect(self, queryset: QuerySet, name: str, value: str) -> QuerySet:
        return queryset.filter(**{_THROUGH[self.dataset] + _EFFECT_PATHS[name]: value})

    def applied(self) -> dict[str, str]:
        """The filter's values that narrow the export, as text (for the export's record). A
        card number someone typed into a filter is tokenized like any other stored text."""
        applied = {
            name: value.isoformat()
            if isinstance(value, datetime.datetime)
            else scrub_cards(str(value))
            for name, value in self.form.cleaned_data.items()
            if value not in (None, "")
        }
        if self.teams is not None:
            # The export was narrowed to these teams (ADR 0014): its record says so.
            applied["teams"] = ",".join(str(t) for t in sorted(self.teams)) or "none"
        return applied


# --- The statement ---------------------------------------------------------------------------


def copy_statement(filters: ExportFilter, fmt: str) -> str:
    """`COPY (SELECT …) TO STDOUT` of the filtered rows in `fmt`, one COPY row per row."""
    if fmt not in CONTENT_TYPES:
        raise ValueError(f"unknown format {fmt!r}")
    columns = COLUMNS[filters.dataset]()
    cells = [
        _FormulaGuard(expr) if kind == TEXT and fmt == "csv" else expr for _, expr, kind in columns
    ]
    sql, params = filters.qs.order_by().values_list(*cells).query.sql_with_params()
    # COPY takes no bind parameters: the values are merged in by psycopg's own quoting. The
    # derived column list names the columns, for row_to_json's keys and the ORDER BY.
    names = ", ".join(connection.ops.quote_name(name) for name, _, _ in columns)
    rows = f"({connection.ops.compose_sql(sql, params)}) AS t({names})"
    if fmt == "csv":
        select, options = f"SELECT * FROM {rows}", "FORMAT csv"
    else:
        # row_to_json rather than json_build_object, which on PostgreSQL 15 looks up every
        # argument's type again on every row (measured: twice the cost). The one text column
        # goes through COPY's CSV format because the text format would double every backslash
        # of the JSON; PostgreSQL's JSON escapes all control characters, so with \x01 as
        # delimiter and \x02 as quote nothing is ever quoted or escaped: each COPY row is
        # exactly the JSON object and a newline.
        select = f"SELECT row_to_json(t)::text FROM {rows}"
        options = "FORMAT csv, DELIMITER E'\\x01', QUOTE E'\\x02'"
    return f"COPY ({select} ORDER BY t.created_at, t.id) TO STDOUT WITH ({options})"


# --- Running an export -----------------------------------------------------------------------


def begin(user: AbstractBaseUser, fmt: str, filters: ExportFilter) -> AuditExport:
    """Record an export before its first byte: who, what and with which filter."""
    if fmt not in CONTENT_TYPES:
        raise ValueError(f"unknown format {fmt!r}")
    return AuditExport.objects.create(
        user=user,
        username=user.get_username(),
        dataset=filters.dataset,
        format=fmt,
        filters=filters.applied(),
    )


def stream(export: AuditExport, filters: ExportFilter) -> Iterator[bytes]:
    """The export's bytes; when the last one has been taken, its record gets the row count and
    `finished_at` (database clock). Closed early, the record stays unfinished."""
    statement = copy_statement(filters, export.format)
    pending: list[Any] = []
    if export.format == "csv":
        pending.append((",".join(column_names(export.dataset)) + "\n").encode())
    size, rows = 0, 0
    settings = PLANNER_SETTINGS.get(export.dataset)
    with transaction.atomic(), connection.cursor() as cursor:
        if settings:
            cursor.execute(settings)
        with cursor.copy(statement) as copy:
            # PostgreSQL sends one COPY message per row, so counting reads counts rows (a CSV
            # row with a newline inside a quoted cell is still one message).
            while row := copy.read():
                rows += 1
                pending.append(row)
                size += len(row)
                if size >= CHUNK_BYTES:
                    yield b"".join(pending)
                    pending.clear()
                    size = 0
    if pending:
        yield b"".join(pending)
    AuditExport.objects.filter(pk=export.pk).update(rows=rows, finished_at=Now())


def filename(export: AuditExport) -> str:
    """`ledger-events-2026-12-02-17.jsonl`: dataset, date, the export's record, format."""
    day = export.started_at.date().isoformat()
    return f"ledger-{export.dataset}-{day}-{export.pk}.{export.format}"


def recent(limit: int = 20, user: AbstractBaseUser | None = None) -> QuerySet[AuditExport]:
    """The latest exports; with `user`, only theirs."""
    made = AuditExport.objects.all() if user is None else AuditExport.objects.filter(user=user)
    return made.order_by("-started_at", "-id")[:limit]
