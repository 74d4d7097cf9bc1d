"""Amount limits across a lost window: what the lost branch spent is counted as used.

Amount limits (`ledger.rules.limits`) sum one `AmountCharge` row per effect over a rolling
24 hours. Effects lost with a window take their rows with them, so after a restore an agent could
spend its daily limit a second time. The witness therefore records each limit's spend of the
last 24 hours; entering restore mode compares it with what the database holds over the same 24
hours and counts the difference as used: one row per limit and currency, charged at the moment
the witness was written, on the restore's own decision effect, so that it rolls off with the
window like any other charge and is never released.

An intent posted again after the restore counts once more when it is claimed: the limit errs
towards refusing, never towards spending twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection

from ledger.models import AmountCharge, Effect

_CHARGES = AmountCharge._meta.db_table
WINDOW = timedelta(hours=24)


def _key(scope: str, currency: str) -> str:
    return f"{scope}|{currency}"


def spent(until: datetime | None = None) -> dict[str, int]:
    """Each limit's spend (minor units) over the 24 hours before `until` (now by default),
    keyed `scope|currency`."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT scope, currency, sum(amount_minor) FROM {_CHARGES} "
            "WHERE charged_at > coalesce(%(until)s, now()) - %(window)s "
            "AND charged_at <= coalesce(%(until)s, now()) GROUP BY scope, currency",
            {"until": until, "window": WINDOW},
        )
        return {_key(scope, currency): int(total) for scope, currency, total in cursor.fetchall()}


def count_again(witness: dict[str, Any] | None, decision: Effect | None) -> dict[str, int]:
    """Count as used what the witness saw spent and the database no longer holds. Returns the
    amounts counted, by `scope|currency`."""
    seen = (witness or {}).get("spend") or {}
    if not seen or decision is None:
        return {}
    written_at = datetime.fromisoformat(witness["written_at"])  # type: ignore[index]
    held = spent(written_at)
    counted = {key: int(total) - held.get(key, 0) for key, total in seen.items()}
    counted = {key: lost for key, lost in counted.items() if lost > 0}
    AmountCharge.objects.bulk_create(
        AmountCharge(
            effect=decision,
            scope=key.rsplit("|", 1)[0],
            currency=key.rsplit("|", 1)[1],
            amount_minor=lost,
            charged_at=written_at,
        )
        for key, lost in counted.items()
    )
    return counted
