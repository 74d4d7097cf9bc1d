"""`manage.py decide`: break-glass decisions on the server, through the one decision service as
the person named, recorded with channel `command`; every refusal a `CommandError` with the
page's reason code, and nothing written."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from ledger.models import Effect, Reason, ReviewItem, Team, Tool
from ledger.policy.teams import add_member
from reviews.access.counts import forget
from tests.factories import in_review, signed_in


def decide(effect: Effect, action: str, *args: str) -> str:
    out = StringIO()
    call_command("decide", str(effect.id), action, *args, stdout=out)
    return out.getvalue()


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind="decision"))


@pytest.fixture
def unknown(make_effect) -> Effect:
    effect = make_effect("unknown", attempt=1)
    in_review(effect)
    return effect


def test_a_break_glass_decision_is_recorded_as_the_person_with_channel_command(olga, unknown):
    said = decide(
        unknown, "confirm", "--reason", "pages down; dashboard shows ch_9", "--as", "olga",
        "--provider-ref", "ch_9", "--evidence", "provider dashboard",
    )  # fmt: skip

    unknown.refresh_from_db()
    assert (unknown.status, unknown.provider_ref) == ("confirmed", "ch_9")
    [decision] = decisions_on(unknown)
    assert f"Decision {decision.id} recorded (confirm, channel command)" in said
    assert decision.provenance["actor"] == "operator:olga"
    assert decision.provenance["channel"] == "command"
    assert decision.provenance["via"].startswith("manage.py decide, run by ")
    assert ReviewItem.objects.get(effect=unknown).resolved_by == olga


def _refused(effect: Effect, code: str, *args: str) -> None:
    with pytest.raises(CommandError, match=rf"refused \({code}\)"):
        decide(effect, *args)


def untouched(effect: Effect) -> None:
    before = effect.status
    effect.refresh_from_db()
    assert effect.status == before and decisions_on(effect) == []
    assert ReviewItem.objects.filter(effect=effect, resolved_at__isnull=True).exists()


FAIL = ("fail", "--reason", "declined", "--evidence", "bank said no")


def test_a_person_without_the_role_or_deactivated_is_refused(olga, nemo, unknown):
    _refused(unknown, "not_an_operator", *FAIL, "--as", "nemo")
    User.objects.filter(pk=olga.pk).update(is_active=False)
    _refused(unknown, "not_an_operator", *FAIL, "--as", "olga")
    untouched(unknown)


def test_what_the_page_would_refuse_is_refused_with_its_code(olga, unknown):
    _refused(unknown, "validation_error", "confirm", "--reason", "x", "--as", "olga")
    _refused(unknown, "invalid_transition", "approve", "--reason", "x", "--as", "olga")
    untouched(unknown)
    seen = str(unknown.version)
    decide(unknown, *FAIL, "--as", "olga")
    with pytest.raises(CommandError, match=r"refused \(already_decided\).*olga"):
        decide(unknown, "cancel", "--reason", "late", "--as", "olga", "--expected-version", seen)
    assert len(decisions_on(unknown)) == 1


def test_the_proposer_of_a_retry_cannot_approve_it_from_the_command_line(olga, otto, make_effect):
    email = make_effect("unknown", tool="send_email", attempt=1)
    in_review(email, Reason.NO_LOOKUP)
    email.refresh_from_db()
    signed_in(olga).post(
        f"/effects/{email.id}/decide/retry",
        {"version": email.version, "reason": "never arrived", "evidence": "mail log",
         "verified_absent": "on", "confirm": "on"},
    )  # fmt: skip
    assert len(decisions_on(email)) == 1

    _refused(email, "four_eyes", "approve", "--reason", "ok", "--as", "olga")
    assert len(decisions_on(email)) == 1
    decide(email, "approve", "--reason", "ok", "--as", "otto")
    email.refresh_from_db()
    assert email.status == "planned"


def test_another_teams_operator_is_refused(olga, unknown, tools):
    team = Team.objects.create(name="Beta", slug="beta")
    Team.objects.create(name="Alpha", slug="alpha")
    Tool.objects.filter(name="charge_card").update(team=team)
    add_member(olga, Team.objects.get(slug="alpha"))
    forget()
    _refused(unknown, "outside_teams", *FAIL, "--as", "olga")
    untouched(unknown)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("not-a-uuid", "fail"), "No effect with the id"),
        (("00000000-0000-4000-8000-000000000000", "fail"), "No effect with the id"),
    ],
)
def test_an_unknown_effect_or_person_is_a_clear_error(olga, unknown, args, message):
    with pytest.raises(CommandError, match=message):
        call_command("decide", *args, "--reason", "x", "--as", "olga", stdout=StringIO())
    with pytest.raises(CommandError, match="No account named 'nobody'"):
        decide(unknown, *FAIL, "--as", "nobody")
    with pytest.raises(CommandError, match="not valid JSON"):
        decide(unknown, *FAIL, "--as", "olga", "--compensation-request", "{nope")
    untouched(unknown)
