"""Restore mode: the witness notices a database that went back in time, and entering the mode
puts in doubt what may have moved, sets lost controls again, moves sequences forward and
records the fork; it shows on /health, /metrics and the pages, and ends with a reason.

The database here is the suite's own. A witness from *later* than the database is what a
restore or a lossy failover leaves behind: the witness is written from the database, and then
given what the lost commits would have added (a later chain head, higher sequences, a halt, a
revoked key), exactly the fields a real later witness differs in.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.test import Client
from django.utils import timezone

from ledger.audit import witness
from ledger.audit.seal import seal_all
from ledger.containment.keys import issue_key
from ledger.models import (
    Alert,
    AlertKind,
    ApiKey,
    Effect,
    EffectEvent,
    Halt,
    Reason,
    RestoreWindow,
    ReviewItem,
)
from ledger.models.states import Status, is_allowed
from ledger.overview.summary import summary
from ledger.restore import gap, mode
from tests.factories import signed_in
from tests.helpers import assert_error

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def witness_file(tmp_path, settings):
    settings.LEDGER_WITNESS_PATH = str(tmp_path / "witness" / "ledger.json")
    return tmp_path / "witness" / "ledger.json"


def later(state: dict, *, seals: int = 5, by: int = 100) -> dict:
    """`state` as a witness written after commits the database then lost."""
    state = json.loads(json.dumps(state))
    state["chain_head"] = {"seq": state["chain_head"]["seq"] + seals, "hash": "f" * 64}
    state["sequences"] = {name: value + by for name, value in state["sequences"].items()}
    return state


def backdate(effect: Effect, hours: float) -> None:
    Effect.objects.filter(pk=effect.pk).update(updated_at=timezone.now() - timedelta(hours=hours))


@pytest.fixture(autouse=True)
def seal_at_once(settings):
    settings.LEDGER_SEAL_GRACE = 0


def test_a_database_holding_what_the_witness_saw_has_no_finding(witness_file, alice):
    alice.intent("run-w", "charge", tool="charge_card", target="acct_1", request={})
    seal_all()
    assert mode.check_witness() is None  # nothing to compare yet: the witness is written
    written = json.loads(witness_file.read_text())
    assert written["chain_head"]["seq"] >= 1
    assert "public.ledger_effectevent_id_seq" in written["sequences"]
    assert witness.compare(witness.read()) == []
    assert mode.check_witness() is None and mode.current() is None


def test_each_way_of_being_behind_is_a_finding(witness_file, alice):
    alice.intent("run-w", "charge", tool="charge_card", target="acct_1", request={})
    seal_all()
    state = witness.snapshot()
    behind = later(state)
    checks = {f.check for f in witness.compare(behind)}
    assert checks == {"chain_head", "sequence"}
    if state["system_identifier"] is not None:
        other = {**state, "system_identifier": "1"}
        assert [f.check for f in witness.compare(other)] == ["identity"]
    if state["timeline"] is not None:
        newer = {**state, "timeline": int(state["timeline"]) + 1}
        assert [f.check for f in witness.compare(newer)] == ["timeline"]
    rewritten = {**state, "chain_head": {"seq": state["chain_head"]["seq"], "hash": "0" * 64}}
    assert [f.check for f in witness.compare(rewritten)] == ["chain_head"]


def test_an_unreadable_witness_is_refused_not_trusted(witness_file):
    witness_file.parent.mkdir(parents=True)
    witness_file.write_text('{"format": 1, "chain_head": {}}')
    with pytest.raises(witness.WitnessUnreadable):
        witness.read()
    assert mode.check_witness() is None
    # Not overwritten: the file is evidence until someone looks at it.
    assert json.loads(witness_file.read_text()) == {"format": 1, "chain_head": {}}


def test_a_database_behind_its_witness_enters_restore_mode(witness_file, make_effect, alice):
    """The lost window's moves are put in doubt; older and finished effects are left alone;
    a halt and a key revocation the database lost are set again; sequences pass the witness."""
    planned = make_effect("planned")
    dispatching = make_effect("dispatching")
    waiting = make_effect("awaiting_confirmation")
    approval = make_effect("awaiting_approval")
    old = make_effect("planned")
    backdate(old, hours=3)
    done = make_effect("confirmed")
    issue_key(alice.agent, "spare")
    seal_all()
    seen = later(witness.snapshot())
    seen["halts"] = [
        {
            "scope": "tool",
            "value": "charge_card",
            "reason": "duplicate charges under investigation",
            "halted_by": "olga",
            "since": timezone.now().isoformat(),
            "include_compensations": False,
        }
    ]
    prefix = ApiKey.objects.exclude(revoked_at__isnull=False).order_by("-pk").first().prefix
    seen["revoked_keys"] = [prefix]
    witness_file.parent.mkdir(parents=True)
    witness_file.write_text(json.dumps(seen))

    entered = mode.check_witness()

    assert entered is not None and entered.new
    window = entered.window
    assert window.source == "witness" and {f["check"] for f in window.findings} >= {"chain_head"}
    for effect in (planned, dispatching, waiting, approval):
        effect.refresh_from_db()
        assert effect.status == Status.UNKNOWN, effect
        assert effect.lease_token is None and effect.next_check_at is not None
        moved = EffectEvent.objects.filter(effect=effect, to_status="unknown").get()
        assert (moved.reason, moved.actor) == ("restored_gap", "system:restore")
        item = ReviewItem.objects.get(effect=effect, resolved_at__isnull=True)
        assert item.reason == Reason.RESTORED_GAP
    for effect, status in ((old, "planned"), (done, "confirmed")):
        effect.refresh_from_db()
        assert effect.status == status
    assert window.applied["in_doubt"] == 4
    halt = Halt.objects.get(scope="tool", value="charge_card", resumed_at__isnull=True)
    assert halt.halted_by == "system:restore" and "olga" in halt.reason
    assert ApiKey.objects.get(prefix=prefix).revoked_at is not None
    for name, value in witness.sequences().items():
        assert value > seen["sequences"].get(name, -1), name
    decision = Effect.objects.get(effect_key=f"restore:{window.pk}:decision:begin")
    assert decision.target == f"restore:{window.pk}"
    assert Alert.objects.filter(kind=AlertKind.RESTORE, key=str(window.pk)).count() == 1
    # While the mode is on, the witness is not overwritten by the database that is behind it.
    assert json.loads(witness_file.read_text())["chain_head"] == seen["chain_head"]
    # The next check finds the same, and enters nothing new.
    assert not mode.check_witness().new
    assert RestoreWindow.objects.count() == 1


def test_an_effect_put_in_doubt_cannot_be_claimed(make_effect, alice):
    intent = alice.intent("run-r", "charge", tool="charge_card", target="acct_1", request={})
    mode.begin(lost_since=timezone.now() - timedelta(minutes=1), reason="restored", by="shell:t")
    response = alice.post(f"/effects/{intent['id']}/claim", {"owner": "worker-1"})
    body = assert_error(response, 409, "invalid_transition")
    assert body["status"] == "unknown"


def test_the_new_moves_into_unknown_are_allowed_by_the_trigger_and_nothing_else_is(make_effect):
    assert is_allowed("planned", "unknown") and is_allowed("awaiting_approval", "unknown")
    assert not is_allowed("planned", "failed") and not is_allowed("cancelled", "unknown")
    done = make_effect("cancelled")
    with pytest.raises(DatabaseError), transaction.atomic():
        Effect.objects.filter(pk=done.pk).update(status="unknown")


def scraped() -> str:
    response = Client().get(
        "/metrics", headers={"Authorization": "Bearer metrics-token-0123456789"}
    )
    assert response.status_code == 200
    return response.content.decode()


def test_health_metrics_and_pages_show_the_mode_until_it_ends(make_effect, olga, settings):
    settings.LEDGER_METRICS_TOKEN = "metrics-token-0123456789"
    make_effect("planned")
    lost = timezone.now() - timedelta(minutes=5)
    assert Client().get("/api/v1/health").json()["restore_mode"] is False
    window = mode.begin(lost_since=lost, reason="restored from backup", by="shell:t").window

    health = Client().get("/api/v1/health").json()
    assert health["restore_mode"] is True and health["restore_lost_since"].startswith(
        lost.strftime("%Y-%m-%dT%H:%M")
    )
    summary.expire()
    metrics = scraped()
    assert "ledger_restore_mode 1.0" in metrics
    assert "ledger_restore_unchecked_effects 1.0" in metrics
    page = signed_in(olga).get("/queue/").content.decode()
    assert 'id="restore-banner"' in page and "1 of the\n    1 effect put in doubt" in page

    with pytest.raises(Exception, match="Give a reason"):
        mode.end(reason=" ", by="shell:t")
    mode.end(reason="checked by hand with the provider", by="shell:t")
    assert Effect.objects.filter(effect_key=f"restore:{window.pk}:decision:end").exists()
    assert Client().get("/api/v1/health").json()["restore_mode"] is False
    summary.expire()
    assert "ledger_restore_mode 0.0" in scraped()
    assert 'id="restore-banner"' not in signed_in(olga).get("/queue/").content.decode()


def test_the_mode_ends_by_itself_once_every_effect_in_doubt_is_settled(make_effect):
    make_effect("awaiting_confirmation")
    mode.begin(lost_since=timezone.now(), reason="failover", by="shell:t")
    assert mode.end_if_checked() is None
    gap.sweeps_due(
        mode.current(), []
    )  # no tool here can list the window (tests/test_restore_gap.py)
    ReviewItem.objects.filter(reason=Reason.RESTORED_GAP).update(resolved_at=timezone.now())
    ended = mode.end_if_checked()
    assert ended is not None and ended.ended_by == "system:restore"
    assert mode.current() is None


def test_the_command_begins_reports_and_ends(make_effect, capsys):
    make_effect("planned")
    call_command(
        "restore", "begin", "--lost-since", "2026-01-01T10:00:00", "--reason", "PITR to 10:00"
    )
    shown = json.loads(capsys.readouterr().out)
    assert shown["on"] is True and shown["source"] == "manual"
    assert shown["lost_since"].startswith("2026-01-01 10:00:00")
    call_command("restore", "status")
    assert json.loads(capsys.readouterr().out)["unchecked"] == 1
    call_command("restore", "end", "--reason", "provider checked")
    assert "ended" in capsys.readouterr().out
    with pytest.raises(CommandError, match="not on"):
        call_command("restore", "end", "--reason", "again")
    with pytest.raises(CommandError, match="ISO 8601"):
        call_command("restore", "begin", "--lost-since", "yesterday", "--reason", "x")
    with pytest.raises(CommandError, match="No witness"):
        call_command("restore", "check")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM ledger_restorewindow")
        assert cursor.fetchone()[0] == 1


# --- New intents while the mode is on ---------------------------------------------------------


def test_new_intents_start_in_doubt_unless_the_provider_deduplicates_them(alice, tools):
    """The ledger cannot tell an intent posted again for an effect it lost from a new one."""
    lost = timezone.now() - timedelta(hours=2)
    before = alice.intent("run-n", "email-before", tool="send_email", target="a@x.test", request={})
    assert before["status"] == "planned"
    mode.begin(lost_since=lost, reason="restored from backup", by="shell:t")

    email = alice.intent("run-n", "email", tool="send_email", target="a@x.test", request={})
    ticket = alice.intent("run-n", "ticket", tool="create_ticket", target="q", request={})
    charge = alice.intent(
        "run-n", "charge", tool="charge_card", target="acct_1", request={"amount": "5.00"}
    )
    balance = alice.intent("run-n", "balance", tool="get_balance", target="acct_1", request={})
    assert (email["status"], ticket["status"]) == ("unknown", "unknown")
    # Keys within their lifetime (24 h, counted from lost_since) and reads: as before.
    assert (charge["status"], balance["status"]) == ("planned", "planned")
    for doubted in (email, ticket):
        item = ReviewItem.objects.get(effect_id=doubted["id"], resolved_at__isnull=True)
        assert item.reason == Reason.RESTORED_GAP
        assert Effect.objects.get(pk=doubted["id"]).next_check_at is not None
    response = alice.post(f"/effects/{email['id']}/claim", {"owner": "worker-1"})
    assert assert_error(response, 409, "invalid_transition")["status"] == "unknown"
    # Posted again, it is the same effect, still in doubt: never a second one.
    again = alice.intent(
        "run-n", "email", tool="send_email", target="a@x.test", request={}, expect=200
    )
    assert again["id"] == email["id"] and again["status"] == "unknown"

    mode.end(reason="window checked", by="shell:t")
    after = alice.intent("run-n", "email-after", tool="send_email", target="a@x.test", request={})
    assert after["status"] == "planned"


def test_a_key_older_than_its_lifetime_no_longer_covers_the_window(alice, tools):
    tools["charge_card"].key_ttl = timedelta(hours=1)
    tools["charge_card"].save()
    mode.begin(lost_since=timezone.now() - timedelta(hours=2), reason="PITR", by="shell:t")
    charge = alice.intent(
        "run-k", "charge", tool="charge_card", target="acct_1", request={"amount": "5.00"}
    )
    assert charge["status"] == "unknown"
