"""Opening review items: effects that no machine can resolve go to people.

Every item is opened by one INSERT shape, whether for one effect (`open_review`) or for a whole
sweep (`reviews.alerts.escalation`): due within the effect's tool's `resolve_within` or the default
(LEDGER_RESOLVE_WITHIN, 24 h), or when the provider's back-office window closes if that comes
first. An effect has at most one open item (the partial unique index
`review_one_open_uniq`): opening another raises the open one to the graver reason, or leaves
it; `close_settled_reviews` closes those of effects a machine has settled. The alerts
(`reviews.alerts`) count down to the due time. A trigger (migration 0016) copies the effect's
tool, agent, run and creation time onto every new item, so that the review queue filters and
sorts by them without the effects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection

from ledger.models import (
    MACHINE_CLOSES,
    SEVERITY,
    Effect,
    EventKind,
    Reason,
    ReviewItem,
    Severity,
    Tool,
)
from ledger.models.states import TERMINAL, Status
from ledger.rules.events import record_event
from ledger.rules.limits import NON_RECEIPT

_TABLE = ReviewItem._meta.db_table
# A reason's severity (`SEVERITY`, else normal) as a SQL expression over `c.reason`.
_SEVERITY_SQL = (
    "CASE c.reason "
    + " ".join(f"WHEN '{reason.value}' THEN {int(level)}" for reason, level in SEVERITY.items())
    + f" ELSE {int(Severity.NORMAL)} END"
)


def due_sql(tool: str, since: str) -> str:
    """SQL: when something a person must look at, opened now, is due. `resolve_within` of the
    tool row `tool` (a table alias; NULL columns take the defaults) after now, or sooner: the
    moment the provider's back-office window (`backoffice_window`, counted from the SQL
    expression `since`), during which its record can still be corrected by a void or a refund,
    closes, if that is still ahead. So the alerts come while the provider can still put things
    right; a window already closed changes nothing."""
    resolve = int(settings.LEDGER_RESOLVE_WITHIN)
    window = int(settings.LEDGER_BACKOFFICE_WINDOW)
    resolved_by = f"now() + COALESCE({tool}.resolve_within, make_interval(secs => {resolve}))"
    closes = f"{since} + COALESCE({tool}.backoffice_window, make_interval(secs => {window}))"
    return f"CASE WHEN {closes} > now() THEN LEAST({resolved_by}, {closes}) ELSE {resolved_by} END"


def open_reviews_sql(candidates: str) -> str:
    """The INSERT that opens an item for each row of `candidates`, a SELECT of
    `(effect_id, reason)`. Where the effect has an open item already, the item takes the new
    reason and severity if that is graver (a duplicate found on an inconclusive item), and is
    otherwise left as it is. Due as `due_sql` says, the window counted from the effect's
    creation."""
    return f"""
        INSERT INTO {_TABLE} (effect_id, reason, severity, opened_at, due_at, resolution)
        SELECT c.effect_id, c.reason, {_SEVERITY_SQL}, now(), {due_sql("t", "e.created_at")}, ''
          FROM ({candidates}) c
          JOIN {Effect._meta.db_table} e ON e.id = c.effect_id
          LEFT JOIN {Tool._meta.db_table} t ON t.name = e.tool
        ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO UPDATE
           SET reason = EXCLUDED.reason, severity = EXCLUDED.severity
         WHERE {_TABLE}.severity < EXCLUDED.severity
    """


def open_review(effect_id: Any, reason: Reason) -> bool:
    """Open a review item, or raise the open one to this reason if it is graver. Returns
    whether an item was opened or raised."""
    with connection.cursor() as cursor:
        cursor.execute(
            open_reviews_sql("SELECT %(effect)s::uuid AS effect_id, %(reason)s AS reason"),
            {
                "effect": effect_id,
                "reason": Reason(reason).value,
            },
        )
        return cursor.rowcount == 1


# Who is a machine: what they settle, they settle on evidence a person would have looked for.
MACHINE_ACTORS = ("system:", "provider:")


def settles(actor: str, to: Status, reason: str) -> bool:
    """Does this move answer what a review item asked, so that the item closes by itself? A
    machine's move to a terminal status, or its proof that the request never arrived."""
    return actor.startswith(MACHINE_ACTORS) and (
        to in TERMINAL or (to == Status.PLANNED and reason in NON_RECEIPT)
    )


def close_settled_reviews(
    effect_ids: Sequence[Any], *, status: str, actor: str, reason: str
) -> int:
    """Close the open items of effects a machine has just settled in `status` (`settles`),
    each with a `review_closed` event on its effect, in the caller's transaction. Only items
    that asked what happened (`MACHINE_CLOSES`); the others wait for a person. Returns how
    many closed. One statement through `review_one_open_uniq` when none is open."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {ReviewItem._meta.db_table} SET resolved_at = now(), resolution = %s "
            "WHERE effect_id = ANY(%s::uuid[]) AND resolved_at IS NULL AND reason = ANY(%s) "
            "RETURNING id, effect_id, reason",
            [
                f"Settled by {actor}: {reason}"[:2000],
                [str(i) for i in effect_ids],
                sorted(r.value for r in MACHINE_CLOSES),
            ],
        )
        closed = cursor.fetchall()
    for item_id, effect_id, item_reason in closed:
        record_event(
            effect_id,
            kind=EventKind.REVIEW_CLOSED,
            actor=actor,
            from_status=status,
            to_status=status,
            reason=reason,
            data={"review_item": item_id, "item_reason": item_reason},
        )
    return len(closed)
