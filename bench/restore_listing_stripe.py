"""The restore listing benchmark through the Stripe adapter (`reconcilers.providers.stripe`):
its tool, declared against the payments sandbox's Stripe face (`/v1/…`) with a test key, and
the PaymentIntents of the lost window written straight into the face's table.

Each PaymentIntent is built by the face's own object functions
(`devstack.sandbox.stripe_objects`: created, a test card attached, confirmed), so the SDK reads
the shape the face serves, and carries the effect's identity in its metadata as the paying
agent sends it (`ledger_key`, `ledger_effect`, `ledger_target`). Its id is `pi_` and the
record's number, which the ledger's effect holds as its provider ref.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from devstack.sandbox import stripe_objects

TOOL = "bench_listing_stripe"
KEY_ENV = "BENCH_LISTING_STRIPE_KEY"
ENV = {KEY_ENV: "sk_test_bench_listing"}  # the face takes any test secret key
TARGET = "acct_1"
REF_PREFIX = "pi_"


def tools_toml(url: str) -> str:
    return f"""
[tools.{TOOL}]
description = "The restore listing benchmark's Stripe tool, listed by the sandbox's Stripe face."
preset = "idempotent"
mode = "test"
has_lookup = true
key_ttl = "24h"
settle_after = "2m"
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
reconciler = "stripe"
reconciler_config = {{ base_url = "{url}", api_key_env = {{ test = "{KEY_ENV}" }} }}
"""


def effect_id(n: int) -> str:
    """The id the ledger's effect `n` has (`md5('l' || n)::uuid` in `fill_ledger`)."""
    return str(uuid.UUID(hashlib.md5(f"l{n}".encode()).hexdigest()))


def payment_intent(n: int, key: str, created: int) -> dict[str, Any]:
    """PaymentIntent `n` for 12.50 EUR, succeeded, as the face answers a confirmed create."""
    asked = {
        "amount": "1250",
        "currency": "eur",
        "metadata": {"ledger_key": key, "ledger_effect": effect_id(n), "ledger_target": TARGET},
    }
    intent = stripe_objects.payment_intent(asked, created)
    drawn, intent["id"] = intent["id"], f"{REF_PREFIX}{n:024d}"
    intent["client_secret"] = intent["client_secret"].replace(drawn, intent["id"])
    stripe_objects.attach(intent, "pm_card_visa")
    if stripe_objects.confirm(intent) is not None:
        raise RuntimeError("the sandbox declined its test card")
    return intent


def _rows(n: int, key: Callable[[int], str], first: datetime, step: timedelta) -> Iterator[tuple]:
    for i in range(1, n + 1):
        intent = payment_intent(i, key(i), int((first + step * i).timestamp()))
        yield (intent["id"], "payment_intent", intent["created"], intent["amount"],
               intent["currency"], intent["status"], None, intent["latest_charge"], key(i),
               json.dumps(intent))  # fmt: skip


def fill_provider(
    store: Path, n: int, now: datetime, key: Callable[[int], str], spread: timedelta
) -> None:
    """`n` PaymentIntents created in the last `spread` before `now`, oldest first, straight
    into the Stripe face's table (`stripe_objects`) of the payments sandbox's store."""
    with sqlite3.connect(store) as db:
        db.executemany(
            "INSERT INTO stripe_objects (id, object, created, amount, currency, status, parent,"
            " charge, ledger_key, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _rows(n, key, now - spread, spread / n),
        )
