"""Builders that several test modules use: rows in given states, provider calls, a gunicorn on
the test database. Fixtures are plugins under tests/fixtures/; the basics in tests/helpers.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from django.db import connection
from django.test import Client

from devstack.embedded import free_port
from devstack.provision import database_url
from devstack.web import gunicorn_argv
from ledger.effects.transitions import record_event
from ledger.models import Effect, EffectEvent, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from tests.helpers import ROOT, events_of

if TYPE_CHECKING:
    from tests.fixtures.providers import SandboxProvider

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


def lookup(effect: Effect, outcome: str, **data: Any) -> int:
    """A provider lookup's answer recorded on the effect as the reconciler records it (outcome
    "found", "not_found", "duplicate", …; a found one may carry `provider_ref` and `record`);
    returns the event's id."""
    record_event(
        effect.id,
        kind="reconciliation",
        actor="reconciler",
        from_status=effect.status,
        to_status=effect.status,
        reason=outcome,
        data={"outcome": outcome, **data},
    )
    return EffectEvent.objects.filter(effect_id=effect.id).latest("id").id


def lookup_found(effect: Effect, ref: str) -> int:
    """The reconciler's lookup found the effect done at the provider under `ref`."""
    return lookup(effect, "found", provider_ref=ref, status="confirmed")


def in_review(effect: Effect, reason: Reason = Reason.INCONCLUSIVE) -> ReviewItem:
    """Open a review item on the effect, as escalation or a reconciler does; returns it."""
    open_review(effect.id, reason)
    return ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)


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


# --- Sandbox providers ---------------------------------------------------------------------


def charge(
    provider: SandboxProvider, key: str | None = None, body: Any = None, **headers: str
) -> httpx.Response:
    if key is not None:
        headers["Idempotency-Key"] = key
    return provider.http.post("/charges", json=CHARGE if body is None else body, headers=headers)


def get(provider: SandboxProvider, path: str, **headers: str) -> httpx.Response:
    return provider.http.get(path, headers=headers)


def refund(provider: SandboxProvider, key: str, body: dict[str, Any]) -> httpx.Response:
    return provider.http.post("/refunds", json=body, headers={"Idempotency-Key": key})


def created_ago(effect: Effect, age: timedelta) -> Effect:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET created_at = now() - make_interval(secs => %s) WHERE id = %s",
            [age.total_seconds(), effect.id],
        )
    return effect


# --- Reconciliation --------------------------------------------------------------------------


def lease_ran_out(effect_id: str, seconds_ago: int = 1) -> None:
    """The lease expired `seconds_ago` seconds ago, and the sweep queued the effect for a check
    at that moment (as `queue_expired_leases` does)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET lease_expires_at = now() - make_interval(secs => %s), "
            "next_check_at = now() - make_interval(secs => %s) WHERE id = %s",
            [seconds_ago, seconds_ago, effect_id],
        )


def time_passes(effect_id: str, seconds: float) -> None:
    """Move every timestamp of one effect into the past: as if `seconds` had gone by."""
    columns = [
        "created_at",
        "updated_at",
        "lease_expires_at",
        "next_check_at",
        "left_dispatch_at",
        "confirm_deadline",
        "resolved_at",
    ]
    shift = ", ".join(f"{c} = {c} - make_interval(secs => %s)" for c in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE ledger_effect SET {shift} WHERE id = %s",
            [seconds] * len(columns) + [effect_id],
        )


def due_now(effect_id: str) -> None:
    """The next check is due (its backoff has passed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET next_check_at = now() - interval '1 second' WHERE id = %s",
            [effect_id],
        )


def statuses_of(effect: dict) -> list[str]:
    return [e.to_status for e in events_of(effect["id"]) if e.kind == "transition"]


def lost(alice, step_id: str = "step-1", *, seconds_ago: int = 1, **intent: Any) -> dict:
    """An effect claimed by an agent that then went silent until its lease ran out."""
    effect = alice.intent(step_id=step_id, claim=True, **intent)
    lease_ran_out(effect["id"], seconds_ago)
    return effect


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


@contextmanager
def gunicorn_on_test_database(
    tmp_path: Path, *, workers: int, threads: int, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A real gunicorn serving the test database, for tests that need several worker
    processes: yields (its URL, the process, its log file), once /health answers."""
    log = tmp_path / "gunicorn.log"
    port = free_port()
    full_env = {
        **os.environ,
        "DATABASE_URL": database_url(os.environ["DATABASE_URL"], connection.settings_dict["NAME"]),
        **(env or {}),
    }
    argv = gunicorn_argv(
        "config.wsgi:application", f"127.0.0.1:{port}", workers=workers, threads=threads
    )
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            try:
                if httpx.get(f"{url}/api/v1/health", timeout=1, trust_env=False).is_success:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield url, proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
