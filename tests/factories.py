"""Helpers that several test modules build on; fixtures live in conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
from django.db import connection
from django.test import Client

from ledger.models import Effect, EffectEvent, ReviewItem
from ledger.transitions import record_event
from tests.conftest import events_of

CHARGE = {"amount": "10.00", "currency": "EUR", "account": "acct_42"}
# charge_card's settle_after in tools.toml is 2 minutes: a lease that ran out 3 minutes ago
# is long enough ago for a provider's "not found" to prove the charge never arrived.
SETTLED = 180


# --- Pages -----------------------------------------------------------------------------------


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


# --- The event log and its seals -------------------------------------------------------------


def add_event(effect: Effect, reason: str = "checked", **data: object) -> int:
    """Append an event the way the ledger does, and return its id."""
    record_event(
        effect.id,
        kind="transition",
        actor="test",
        from_status="planned",
        to_status="planned",
        reason=reason,
        data=data or {"note": reason},
    )
    return EffectEvent.objects.filter(effect_id=effect.id).latest("id").id


@contextmanager
def tampering() -> Iterator:
    """Switch off every trigger of this session (the append-only guards and foreign keys), as
    someone with direct database access could."""
    with connection.cursor() as cursor:
        # Foreign-key checks deferred until commit would otherwise run against the tampering.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("SET session_replication_role = replica")
        try:
            yield cursor
        finally:
            cursor.execute("SET session_replication_role = DEFAULT")


# --- Reconciliation --------------------------------------------------------------------------


def charge_at(provider, effect: dict, **body: Any) -> httpx.Response:
    """Charge at the provider behind the ledger's back, as the agent does after claiming."""
    return provider.http.post(
        "/charges",
        json={**CHARGE, **body},
        headers={"Idempotency-Key": effect["idempotency_key"]},
    )


def stored(effect: dict) -> Effect:
    return Effect.objects.get(pk=effect["id"])


def checks_of(effect: dict) -> list[EffectEvent]:
    return [e for e in events_of(effect["id"]) if e.kind == "reconciliation"]


def reviews_of(effect: dict) -> list[tuple[str, bool]]:
    items = ReviewItem.objects.filter(effect_id=effect["id"]).order_by("id")
    return [(item.reason, item.resolved_at is None) for item in items]
