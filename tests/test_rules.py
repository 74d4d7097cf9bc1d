"""Each rule is decided in one place, and everyone who applies it agrees.

- Blocked: the claim, `/recovery`, the effect as the API shows it and the operators' overview,
  over every upstream status × the state of a compensation of that upstream.
- Retry-safe: `/recovery`'s plan and an operator's *Retry*, over every status × capability.
"""

from __future__ import annotations

from datetime import timedelta
from itertools import product

import pytest
from django.db import connection
from django.test import Client

from ledger.models import Effect, EffectDependency, Tool
from ledger.models.states import INCOMPLETE, Kind, Status
from reviews.decisions.decide import Ask, decide
from reviews.decisions.declaration import Action
from reviews.decisions.refusals import RetryUnsafe

NO_COMPENSATION = None


def _blocked_everywhere(alice, olga, downstream: Effect) -> dict[str, bool]:
    """Is `downstream` blocked, as each of its four readers sees it?"""
    recovery = alice.post("/recovery", {"dry_run": True}).json()
    plans = {row["effect"]["id"]: row for row in recovery["effects"]}
    page = Client()
    page.force_login(olga)
    overview = page.get("/")
    shown = alice.get(f"/effects/{downstream.id}").json()
    claim = alice.post(f"/effects/{downstream.id}/claim", {"owner": "w"})
    return {
        "claim": claim.status_code == 409 and claim.json()["error"] == "blocked",
        "recovery": (plans[str(downstream.id)]["action"], plans[str(downstream.id)]["reason"])
        == ("wait", "blocked"),
        "effect": shown["blocked_by"] != [],
        "overview": any(str(b["id"]) == str(downstream.id) for b in overview.context["blocked"]),
    }


@pytest.mark.parametrize(
    ("upstream_status", "compensation_status"),
    list(product(Status.values, [NO_COMPENSATION, *Status.values])),
)
def test_claim_recovery_the_effect_and_the_overview_agree_on_what_is_blocked(
    alice, olga, make_effect, upstream_status, compensation_status
):
    upstream = make_effect(upstream_status)
    if compensation_status is not NO_COMPENSATION:
        make_effect(
            compensation_status, kind=Kind.COMPENSATION, parent=upstream, tool="refund_card"
        )
    downstream = make_effect("planned", tool="send_email")
    EffectDependency.objects.create(downstream=downstream, upstream=upstream)

    expected = upstream_status != Status.CONFIRMED or compensation_status in INCOMPLETE
    seen = _blocked_everywhere(alice, olga, downstream)
    assert seen == dict.fromkeys(seen, expected)


# Capabilities a tool can declare, as (name, Tool fields).
CAPABILITIES = {
    "read_only": {"read_only": True},
    "honours_key": {"honours_key": True, "key_ttl": timedelta(days=1)},
    "honours_key_expired": {"honours_key": True, "key_ttl": timedelta(seconds=1)},
    "lookup": {"has_lookup": True},
    "lookup_and_key": {"has_lookup": True, "honours_key": True, "key_ttl": timedelta(days=1)},
    "none": {},
}
# A retry is safe for these without asking anyone; the others need a provider's answer or a
# person's check.
SAFE = {"read_only", "honours_key", "lookup_and_key"}


def _tool(capability: str) -> str:
    name = f"tool_{capability}"
    Tool.objects.update_or_create(
        name=name,
        defaults={
            "read_only": False,
            "honours_key": False,
            "has_lookup": False,
            "key_ttl": None,
            "escalate_after": timedelta(days=1),
            "backoffice_window": timedelta(days=7),
            "retention": timedelta(days=30),
            **CAPABILITIES[capability],
        },
    )
    return name


def _age(effect: Effect, seconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Effect._meta.db_table} SET created_at = now() - make_interval(secs => %s) "
            "WHERE id = %s",
            [seconds, effect.id],
        )


@pytest.mark.parametrize(
    ("status", "capability"),
    list(product([Status.UNKNOWN, Status.DISPATCHING], CAPABILITIES)),
)
def test_recovery_and_an_operator_retry_agree_on_what_may_be_sent_again(
    alice, olga, make_effect, status, capability
):
    """A lost effect (unknown, or dispatching with its lease run out)."""
    effect = make_effect(status, tool=_tool(capability), attempt=1)
    _age(effect, 60)
    if status == Status.DISPATCHING:
        Effect.objects.filter(pk=effect.pk).update(
            lease_expires_at=effect.created_at - timedelta(minutes=5)
        )
    plan = {
        row["effect"]["id"]: (row["action"], row["reason"])
        for row in alice.post("/recovery", {"dry_run": True}).json()["effects"]
    }[str(effect.id)]

    if capability == "read_only":
        assert plan == ("retry_safe", "read_only")
    elif capability in ("lookup", "lookup_and_key"):
        # Ask the provider first, even where a retry would be safe: it may have been done.
        assert plan == ("reconcile", "provider_lookup")
    elif capability == "honours_key":
        assert plan == ("retry_safe", "provider_honours_key")
    else:
        assert plan == ("review", "no_lookup")

    if status != Status.UNKNOWN:
        return  # operators retry only what recovery has marked unknown
    effect.refresh_from_db()
    ask = Ask(action=Action.RETRY, reason="checked", expected_version=effect.version)
    if capability in SAFE:
        assert decide(effect.id, ask, user=olga).target.status == Status.PLANNED
    else:
        with pytest.raises(RetryUnsafe):
            decide(effect.id, ask, user=olga)
        assert Effect.objects.get(pk=effect.pk).status == Status.UNKNOWN


@pytest.mark.parametrize("capability", list(CAPABILITIES))
def test_a_planned_effect_is_retry_safe_for_every_capability_until_its_attempts_are_used(
    alice, make_effect, capability
):
    fresh = make_effect("planned", tool=_tool(capability), attempt=2)
    spent = make_effect("planned", tool=_tool(capability), attempt=3)
    plan = {
        row["effect"]["id"]: (row["action"], row["reason"])
        for row in alice.post("/recovery", {"dry_run": True}).json()["effects"]
    }
    assert plan[str(fresh.id)] == ("retry_safe", "planned")
    assert plan[str(spent.id)] == ("review", "attempts_exhausted")
