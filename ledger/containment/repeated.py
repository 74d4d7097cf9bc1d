"""A request sent twice in one run: two effects of one agent, run and tool with the same
request (the same keyed `request_hash`), each sent under its own key. The provider may have
done it twice, and nothing else would tell: each effect alone looks right.

It happens when an agent's identity for a call is not durable: a model asked again after a
crash re-issues the call with a new call id and the agent derives a new key from it. The
client's adapters key calls by position and request (ADR 0018) so that this does not happen;
this sweep raises it where it still does (an agent of its own, a position that moved).

Every minute (`reconcilers.schedules`), over the effects created in the last `WINDOW`: each that
was sent (it left `planned`) and has an earlier sent effect of its run, tool and request is
flagged once, with a `repeated` event naming the earlier one, a high-severity review item
(`repeated_request`: refund the later one, or close it as deliberate) and an alert. An agent that
makes the same call twice on purpose in one run says so with a business key
(`key_fields`) or distinct step ids, and an operator closes the item as not a duplicate.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

from ledger.models import Agent, AlertKind, Effect, EventKind, Reason
from ledger.rules import outbox
from ledger.rules.events import record_event
from ledger.rules.reviewqueue import open_review

WINDOW_MINUTES = 15
_EFFECTS = Effect._meta.db_table
_EVENTS = "ledger_effectevent"
# Sent: it reached dispatching at least once. Planned (never claimed, or proven not received
# and waiting), awaiting approval and cancelled effects were not sent.
_SENT = "status NOT IN ('planned', 'awaiting_approval', 'cancelled')"

# Per agent through `effect_list_idx` (agent, created_at): the recent effects; for each, the
# earliest earlier effect of its run, tool and request through `effect_journal_idx`.
_CANDIDATES = f"""
    SELECT later.id, later.run_id, later.tool, later.agent_id, earlier.id
      FROM {Agent._meta.db_table} a
      CROSS JOIN LATERAL (
            SELECT e.id, e.run_id, e.tool, e.seq, e.agent_id, e.request_hash, e.effect_key
              FROM {_EFFECTS} e
             WHERE e.agent_id = a.id AND e.created_at > now() - make_interval(mins => %s)
               AND e.kind = 'action' AND e.requested_by = 'agent' AND e.{_SENT}
      ) later
      CROSS JOIN LATERAL (
            SELECT p.id FROM {_EFFECTS} p
             WHERE p.agent_id = later.agent_id AND p.run_id = later.run_id
               AND p.seq < later.seq AND p.tool = later.tool
               AND p.request_hash = later.request_hash AND p.effect_key <> later.effect_key
               AND p.kind = 'action' AND p.{_SENT}
             ORDER BY p.seq LIMIT 1
      ) earlier
     WHERE NOT EXISTS (
            SELECT 1 FROM {_EVENTS} ev
             WHERE ev.effect_id = later.id AND ev.kind = '{EventKind.REPEATED.value}'
     )
     ORDER BY later.seq
     LIMIT 500
"""


def flag_recent(window_minutes: int = WINDOW_MINUTES) -> int:
    """Flag the repeated requests among the effects of the last `window_minutes`; returns how
    many were flagged now (each one only once)."""
    with connection.cursor() as cursor:
        cursor.execute(_CANDIDATES, [window_minutes])
        rows = cursor.fetchall()
    for later, run_id, tool, agent_id, earlier in rows:
        _flag(later, earlier, run_id=run_id, tool=tool, agent_id=agent_id)
    return len(rows)


def _flag(later: Any, earlier: Any, *, run_id: str, tool: str, agent_id: int) -> None:
    with transaction.atomic():
        status = Effect.objects.select_for_update().values_list("status", flat=True).get(pk=later)
        record_event(
            later,
            kind=EventKind.REPEATED,
            actor="system:repeated-requests",
            from_status=status,
            to_status=status,
            reason=Reason.REPEATED_REQUEST.value,
            data={"earlier_effect_id": str(earlier), "run_id": run_id, "tool": tool},
        )
        open_review(later, Reason.REPEATED_REQUEST)
        outbox.notify(
            AlertKind.REPEATED_REQUEST,
            f"repeated:{later}",
            {
                "summary": f"{tool}: the same request was sent twice in one run ({run_id[:80]})",
                "link": f"/effects/{later}/",
                "effect_id": str(later),
                "earlier_effect_id": str(earlier),
                "tool": tool,
                "agent_id": agent_id,
            },
        )
