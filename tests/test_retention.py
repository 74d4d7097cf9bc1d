"""Retention: payloads of effects resolved longer ago than their tool's retention are redacted,
what later statements and the audit chain need stays, and the event log still refuses every
other change."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import DatabaseError, connection, connections, transaction
from django.utils import timezone

from ledger.audit import seal
from ledger.audit.retention import REDACTED, redact_expired
from ledger.models import Effect, EffectEvent, EventKind, Reason, Tool
from ledger.rules.events import record_event
from ledger.rules.reviewqueue import open_review
from tests.factories import signed_in, tampering

MARKER = '{"redacted": true}'
REDACT = f"UPDATE ledger_effectevent SET data = '{MARKER}' WHERE id = %s"


@pytest.fixture
def payment(alice, tools):
    """A card payment, confirmed with a provider reference and a response, and resolved."""
    Tool.objects.filter(name="charge_card").update(amount_path="amount", currency_path="currency")
    effect = alice.intent(
        claim=True,
        request={"amount": "12.50", "currency": "EUR", "customer": {"email": "c@example.com"}},
        provenance={"model_output": "charge c@example.com 12.50 EUR"},
    )
    alice.outcome(
        effect["id"], effect["lease_token"], provider_ref="ch_1", response={"receipt": "r-77"}
    )
    return Effect.objects.get(pk=effect["id"])


def resolved_ago(effect: Effect | str, **age: float) -> None:
    """Back-date when the effect was resolved, by the database clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET resolved_at = now() - make_interval(secs => %s) "
            "WHERE id = %s",
            [timedelta(**age).total_seconds(), str(getattr(effect, "id", effect))],
        )


def events(effect: Effect) -> list[EffectEvent]:
    return list(EffectEvent.objects.filter(effect_id=effect.id).order_by("id"))


def purges(effect: Effect) -> list[EffectEvent]:
    return [e for e in events(effect) if e.kind == EventKind.RETENTION_PURGE]


def is_redacted(effect: Effect) -> bool:
    effect.refresh_from_db()
    return effect.request == REDACTED


def verify_command() -> str:
    out = io.StringIO()
    call_command("verifyledger", "--seal", stdout=out)
    return out.getvalue()


# --- What goes and what stays ----------------------------------------------------------------


def test_an_old_payment_loses_its_payloads_and_keeps_digests_amount_and_reference(payment):
    before = events(payment)
    assert seal.seal_pending() == len(before)
    resolved_ago(payment, days=31)

    assert redact_expired() == {"effects": 1, "events": len(before), "skipped": 0}

    effect = Effect.objects.get(pk=payment.pk)
    assert (effect.request, effect.response, effect.provenance) == (REDACTED,) * 3
    assert effect.error is None
    assert effect.target == "redacted"
    assert (effect.request_hash, effect.provider_ref) == (payment.request_hash, "ch_1")
    assert (effect.amount_minor, effect.currency) == (1250, "EUR")
    assert (effect.status, effect.version) == (payment.status, payment.version)
    after = events(payment)
    assert [e.data for e in after[:-1]] == [REDACTED] * len(before)
    assert [(e.digest, e.reason, e.kind) for e in after[:-1]] == [
        (e.digest, e.reason, e.kind) for e in before
    ]
    purge = after[-1]
    assert (purge.kind, purge.actor) == (EventKind.RETENTION_PURGE, "system:retention")
    assert (purge.from_status, purge.to_status) == ("confirmed", "confirmed")
    assert purge.data["retention_seconds"] == 30 * 86400
    assert "30 days" in purge.reason

    report = verify_command()
    assert "INTACT" in report
    assert f"{len(before)} sealed events redacted by retention" in report


def test_young_incomplete_and_never_resolved_effects_keep_their_payloads(
    payment, make_effect, alice
):
    resolved_ago(payment, days=29)
    unknown = make_effect("unknown", request={"amount": "3.00"})
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET created_at = now() - interval '90 days', "
            "resolved_at = now() - interval '90 days' WHERE id = %s",
            [unknown.id],
        )
    unresolved = make_effect("confirmed", request={"amount": "4.00"})
    assert unresolved.resolved_at is None
    tail_check = make_effect("confirmed", tail_check_at=timezone.now())
    resolved_ago(tail_check, days=90)

    assert redact_expired()["effects"] == 0
    assert not any(map(is_redacted, (payment, unknown, unresolved, tail_check)))
    assert not purges(payment)


def test_each_tool_keeps_payloads_for_its_own_retention_and_undeclared_tools_the_default(
    payment, make_effect, settings
):
    Tool.objects.filter(name="charge_card").update(retention=timedelta(days=7))
    resolved_ago(payment, days=8)
    settings.LEDGER_RETENTION = 2 * 86400
    undeclared = [make_effect("failed", tool="fax_machine") for _ in range(2)]
    resolved_ago(undeclared[0], days=3)
    resolved_ago(undeclared[1], days=1)

    assert redact_expired()["effects"] == 2
    assert [is_redacted(e) for e in (payment, *undeclared)] == [True, True, False]
    assert purges(payment)[0].data["retention_seconds"] == 7 * 86400


def test_an_open_review_item_keeps_the_payloads_until_it_is_resolved(payment):
    resolved_ago(payment, days=40)
    assert open_review(payment.id, Reason.DUPLICATE)

    assert redact_expired()["effects"] == 0
    assert not is_redacted(payment)

    payment.reviews.update(resolved_at=payment.resolved_at)
    assert redact_expired()["effects"] == 1
    assert is_redacted(payment)


def test_a_legal_hold_keeps_the_payloads_until_it_is_cleared(payment):
    resolved_ago(payment, days=40)
    Effect.objects.filter(pk=payment.pk).update(legal_hold=True)

    assert redact_expired()["effects"] == 0
    assert not is_redacted(payment)

    Effect.objects.filter(pk=payment.pk).update(legal_hold=False)
    assert redact_expired()["effects"] == 1


@pytest.mark.django_db(transaction=True)
def test_an_effect_another_transaction_holds_is_left_for_the_next_run(payment):
    resolved_ago(payment, days=40)
    other = connections.create_connection("default")
    other.set_autocommit(False)
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT 1 FROM ledger_effect WHERE id = %s FOR UPDATE", [payment.id])
        assert redact_expired() == {"effects": 0, "events": 0, "skipped": 1}
    finally:
        other.rollback()
        other.close()
    assert redact_expired()["effects"] == 1


def test_running_it_again_redacts_nothing_more(payment):
    resolved_ago(payment, days=31)
    redact_expired()
    count = len(events(payment))

    assert redact_expired() == {"effects": 0, "events": 0, "skipped": 0}
    assert len(events(payment)) == count
    assert len(purges(payment)) == 1


def test_batches_are_set_based_and_a_run_stops_after_its_batches_or_its_time(make_effect):
    effects = [make_effect("confirmed") for _ in range(5)]
    for n, effect in enumerate(effects):
        record_event(effect.id, kind="transition", actor="test", data={"n": n})
        resolved_ago(effect, days=40 + n)
    statements: list[str] = []

    def count(execute, sql, params, many, context):
        statements.append(sql)
        return execute(sql, params, many, context)

    # Out of time before the first batch: all of them wait for the next run.
    assert redact_expired(budget=-1) == {"effects": 0, "events": 0, "skipped": 5}
    with connection.execute_wrapper(count):
        assert redact_expired(batch=2, max_batches=2) == {"effects": 4, "events": 4, "skipped": 0}
    # One scan, then four statements per batch, each in a transaction (here a savepoint) of
    # its own: set-based, whatever the batch's size.
    shapes = [" ".join(s.split()[:2]) for s in statements if "SAVEPOINT" not in s]
    per_batch = ["SELECT id", "UPDATE ledger_effect", "INSERT INTO", "UPDATE ledger_effectevent"]
    assert shapes == ["SELECT e.id", *per_batch, *per_batch]
    assert sum("RELEASE SAVEPOINT" in s for s in statements) == 2
    # The longest resolved first; the one left is done by the next run.
    assert [is_redacted(e) for e in effects] == [False, True, True, True, True]
    assert redact_expired(batch=2)["effects"] == 1
    assert all(map(is_redacted, effects))


# --- The event log's trigger -----------------------------------------------------------------


def refused(sql: str, *params: object) -> None:
    with (
        pytest.raises(DatabaseError, match="Cannot update or delete"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql, params)


@pytest.fixture
def purged(payment) -> EffectEvent:
    """An event of the payment, whose purge event exists and whose data is not yet redacted."""
    first = events(payment)[0]
    record_event(payment.id, kind=EventKind.RETENTION_PURGE, actor="system:retention")
    return first


def test_with_a_purge_event_the_data_may_become_the_marker_and_nothing_else(purged):
    refused("UPDATE ledger_effectevent SET data = '{\"redacted\": false}' WHERE id = %s", purged.id)
    refused("UPDATE ledger_effectevent SET data = '{}' WHERE id = %s", purged.id)
    refused(
        f"UPDATE ledger_effectevent SET data = '{MARKER}', digest = repeat('0', 64) WHERE id = %s",
        purged.id,
    )
    refused(
        f"UPDATE ledger_effectevent SET data = '{MARKER}', reason = 'x' WHERE id = %s", purged.id
    )
    refused("UPDATE ledger_effectevent SET reason = 'edited' WHERE id = %s", purged.id)
    refused("UPDATE ledger_effectevent SET digest = repeat('0', 64) WHERE id = %s", purged.id)
    refused("DELETE FROM ledger_effectevent WHERE id = %s", purged.id)
    # The purge event itself is kept as it is.
    purge = purges(purged.effect)[0]
    refused(REDACT, purge.id)

    with connection.cursor() as cursor:
        cursor.execute(REDACT, [purged.id])
    redacted = EffectEvent.objects.get(pk=purged.pk)
    assert redacted.data == REDACTED
    assert (redacted.digest, redacted.reason, redacted.created_at) == (
        purged.digest,
        purged.reason,
        purged.created_at,
    )


def test_without_a_purge_event_after_it_an_event_cannot_be_redacted(payment, make_effect):
    first = events(payment)[0]
    refused(REDACT, first.id)
    # A purge of another effect does not count, nor one older than the event.
    other = make_effect("confirmed")
    record_event(other.id, kind=EventKind.RETENTION_PURGE, actor="system:retention")
    refused(REDACT, first.id)
    record_event(payment.id, kind=EventKind.RETENTION_PURGE, actor="system:retention")
    record_event(payment.id, kind="transition", actor="test", data={"late": "line"})
    late = events(payment)[-1]
    refused(REDACT, late.id)
    assert EffectEvent.objects.get(pk=late.pk).data == {"late": "line"}


# --- The verifier ----------------------------------------------------------------------------


def test_the_verifier_counts_redacted_events_and_still_catches_tampering_with_them(payment):
    resolved_ago(payment, days=31)
    redact_expired()
    seal.seal_pending()
    verdict = seal.verify()
    assert verdict.intact
    redacted = [e for e in events(payment) if e.data == REDACTED]
    assert verdict.redacted == len(redacted) > 0

    with tampering() as cursor:
        cursor.execute(
            'UPDATE ledger_effectevent SET data = \'{"redacted": true, "amount": "1"}\' '
            "WHERE id = %s",
            [redacted[0].id],
        )
    verdict = seal.verify()
    assert (verdict.broken.event_id, verdict.broken.problem) == (
        redacted[0].id,
        "payload digest mismatch",
    )


def test_the_marker_without_a_purge_event_is_tampering(payment):
    first = events(payment)[0]
    seal.seal_pending()
    with tampering() as cursor:
        cursor.execute(REDACT, [first.id])
    verdict = seal.verify()
    assert verdict.redacted == 0
    assert (verdict.broken.event_id, verdict.broken.problem) == (
        first.id,
        "payload digest mismatch",
    )


def test_the_marker_on_an_event_appended_after_the_purge_is_tampering(payment):
    resolved_ago(payment, days=31)
    redact_expired()
    record_event(payment.id, kind="statement", actor="system:statements", data={"line": 7})
    late = events(payment)[-1]
    seal.seal_pending()
    with tampering() as cursor:
        cursor.execute(REDACT, [late.id])
    verdict = seal.verify()
    assert verdict.redacted == len(events(payment)) - 2  # all but the purge and the late one
    assert (verdict.broken.event_id, verdict.broken.problem) == (
        late.id,
        "payload digest mismatch",
    )


def test_a_deleted_purge_event_turns_its_redactions_into_breaks(payment):
    resolved_ago(payment, days=31)
    redact_expired()
    seal.seal_pending()
    purge = purges(payment)[0]
    with tampering() as cursor:
        cursor.execute("DELETE FROM ledger_effectevent WHERE id = %s", [purge.id])
    redacted = [e for e in events(payment) if e.data == REDACTED]
    verdict = seal.verify()
    assert verdict.redacted == 0
    assert verdict.broken.problem == "payload digest mismatch"
    assert verdict.problems == len(redacted) + 1  # and the purge event is missing


# --- Reading a redacted effect ---------------------------------------------------------------


def test_a_redacted_effect_reads_in_the_api_and_on_the_operator_page(payment, alice, olga):
    resolved_ago(payment, days=31)
    redact_expired()

    response = alice.get(f"/effects/{payment.id}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["request"], body["response"]) == (REDACTED, REDACTED)
    # The effect object's provenance has fixed fields (docs/api.md): all of them empty now.
    assert set(body["provenance"].values()) == {None}
    assert (body["target"], body["provider_ref"], body["status"]) == (
        "redacted",
        "ch_1",
        "confirmed",
    )
    assert alice.get("/runs/run-1/journal").status_code == 200

    page = signed_in(olga).get(f"/effects/{payment.id}/")
    assert page.status_code == 200
    assert b"system:retention" in page.content
    assert b"c@example.com" not in page.content


# --- The legal hold in the admin -------------------------------------------------------------


def test_an_admin_places_and_clears_a_legal_hold_and_the_admin_logs_it(payment, db):
    admin = User.objects.create_superuser("ada", password="pw-for-tests-only")
    client = signed_in(admin)
    url = "/admin/ledger/effect/"

    def act(action: str) -> None:
        response = client.post(url, {"action": action, "_selected_action": [str(payment.pk)]})
        assert response.status_code == 302, response.content

    act("place_legal_hold")
    assert Effect.objects.get(pk=payment.pk).legal_hold
    act("clear_legal_hold")
    assert not Effect.objects.get(pk=payment.pk).legal_hold
    messages = list(
        LogEntry.objects.filter(object_id=str(payment.pk)).values_list("change_message", flat=True)
    )
    assert messages == ["Cleared the legal hold (retention).", "Placed a legal hold (retention)."]
