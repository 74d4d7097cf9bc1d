"""An operator's refunds for the lost-window drills, decided as the effect page decides them
(`reviews.decisions.decide`, action `compensate`), in a Django process of the drill's stack:

    python manage.py shell -c "from devstack.drills.operator import main; main([...], 'op')"

It prints one JSON line: for each effect, the compensation the decision created (its id and
idempotency key) or the refusal's code. The compensation is sent by the ledger's executor (the
rq worker) after commit, as from the page.
"""

from __future__ import annotations

import json
from typing import Any

REFUND = "1.00"  # of a 10.00 charge: a refund sent twice would be taken twice


def refund(effect_id: str, username: str) -> dict[str, Any]:
    from django.contrib.auth.models import User

    from ledger.errors import LedgerError
    from ledger.models import Effect
    from ledger.policy.tools import policy_for
    from reviews.decisions.decide import Ask, decide

    user = User.objects.get(username=username)
    effect = Effect.objects.get(pk=effect_id)
    ask = Ask(
        action="compensate",
        reason="Drill: the customer asked for part of the charge back.",
        expected_version=effect.version,
        compensation_tool=policy_for(effect.tool).compensated_by,
        compensation_request={"charge": effect.provider_ref, "amount": REFUND},
    )
    try:
        decided = decide(effect.pk, ask, user=user)
    except LedgerError as exc:
        return {"effect": effect_id, "refused": exc.code}
    made = decided.follow_up
    assert made is not None
    return {"effect": effect_id, "compensation": str(made.id), "key": made.idempotency_key,
            "status": made.status}  # fmt: skip


def main(effect_ids: list[str], username: str) -> None:
    print(json.dumps([refund(effect_id, username) for effect_id in effect_ids]))
