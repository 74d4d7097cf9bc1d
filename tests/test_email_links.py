"""An alert email's decision links (issue 33, ADR 0020): one signed, expiring, single-use link
per decision offered, which never decides on its own. Following one needs the person's sign-in;
then, if they may act on the effect and the decision is still offered to them, it is used up
and the effect page opens with that decision's form open, whose decision records "email" as
its channel. An expired, altered or used link says so (a page, 4xx), and every refusal before
the link is used leaves it unused. The browser's side: tests/browser/test_email_link_browser.py.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.test import Client

from ledger.models import Agent, Effect, Team
from ledger.policy.roles import OPERATOR, grant
from ledger.policy.teams import add_member
from reviews.access.counts import forget
from reviews.models import UsedLink
from tests.factories import lookup, signed_in
from tests.slack_interactive import alert_on

LINK = re.compile(
    r"^  (?P<label>[^:]+): (?P<url>https://ledger\.example\.com(?P<path>/links/\S+))$"
)


@pytest.fixture
def emailed(settings, mailoutbox):
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    settings.LEDGER_ALERT_WEBHOOK_URL = ""
    settings.LEDGER_ALERT_LINK_BASE = "https://ledger.example.com"
    settings.LEDGER_EMAIL_LINKS = True
    settings.LEDGER_EMAIL_LINK_MAX_AGE = 24 * 3600
    return settings


@pytest.fixture
def found_charge(make_effect, tools) -> Effect:
    effect = make_effect("unknown", attempt=1)
    lookup(effect, "found", provider_ref="ch_42", status="confirmed")
    return effect


def alert_links(effect: Effect) -> dict[str, str]:
    """The effect's review item overdue, its alert emailed: its links' paths by label."""
    alert_on(effect)
    body = mail.outbox[-1].body
    return {m["label"]: m["path"] for line in body.splitlines() if (m := LINK.match(line))}


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind="decision"))


def test_the_email_offers_each_decision_with_its_link_and_what_it_does(emailed, found_charge):
    links = alert_links(found_charge)

    assert list(links) == ["Confirm (suggested)", "Mark failed"]
    body = mail.outbox[-1].body
    assert "sign in first; each link works once, for 24 h" in body
    assert "The effect becomes confirmed" in body
    assert len(set(links.values())) == 2


def test_a_link_opens_the_decisions_form_after_sign_in_and_records_email(
    emailed, found_charge, olga
):
    path = alert_links(found_charge)["Mark failed"]

    anonymous = Client().get(path)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert not UsedLink.objects.exists()

    browser = signed_in(olga)
    followed = browser.get(path)

    assert followed.status_code == 302
    assert followed["Location"] == f"/effects/{found_charge.id}/?decide=fail#decide-fail"
    page = browser.get(followed["Location"]).content.decode()
    assert re.search(r'id="decide-fail"\s+open', page)
    assert UsedLink.objects.get().used_by == olga
    assert not decisions_on(found_charge)  # a link never decides on its own

    found_charge.refresh_from_db()
    decided = browser.post(f"/effects/{found_charge.id}/decide/fail", {
        "version": found_charge.version, "confirm": "on", "reason": "declined",
        "evidence": "the bank's statement"})  # fmt: skip

    assert decided.status_code == 302
    [decision] = decisions_on(found_charge)
    assert decision.provenance["channel"] == "email"


def test_a_decision_not_opened_from_a_link_records_page(emailed, found_charge, olga):
    alert_links(found_charge)
    found_charge.refresh_from_db()

    signed_in(olga).post(f"/effects/{found_charge.id}/decide/fail", {
        "version": found_charge.version, "confirm": "on", "reason": "declined",
        "evidence": "the bank's statement"})  # fmt: skip

    assert decisions_on(found_charge)[0].provenance["channel"] == "page"


def test_a_used_link_says_so(emailed, found_charge, olga, otto):
    path = alert_links(found_charge)["Confirm (suggested)"]
    signed_in(olga).get(path)

    again = signed_in(otto).get(path)

    assert again.status_code == 410
    assert "used already" in again.content.decode() and "by olga" in again.content.decode()
    assert UsedLink.objects.count() == 1


def test_an_expired_or_altered_link_says_so_and_is_not_used(emailed, found_charge, olga):
    path = alert_links(found_charge)["Confirm (suggested)"]

    emailed.LEDGER_EMAIL_LINK_MAX_AGE = -1
    expired = signed_in(olga).get(path)
    emailed.LEDGER_EMAIL_LINK_MAX_AGE = 24 * 3600
    altered = signed_in(olga).get(path[:-3] + "abc")

    assert expired.status_code == 410 and "expired" in expired.content.decode()
    assert altered.status_code == 404 and "Not a link of this ledger" in altered.content.decode()
    assert not UsedLink.objects.exists()


def test_who_may_not_act_on_it_is_refused_and_the_link_stays_unused(emailed, found_charge, audrey):
    path = alert_links(found_charge)["Confirm (suggested)"]
    alpha = Team.objects.create(name="Alpha", slug="alpha")
    beta = Team.objects.create(name="Beta", slug="beta")
    Agent.objects.filter(pk=found_charge.agent_id).update(team=alpha)
    oscar = User.objects.create_user("oscar")
    grant(oscar, OPERATOR)
    add_member(oscar, beta)
    forget()

    auditor = signed_in(audrey).get(path)
    other_team = signed_in(oscar).get(path)

    assert auditor.status_code == 403
    assert other_team.status_code == 404
    assert not UsedLink.objects.exists()


def test_a_link_to_an_item_decided_meanwhile_says_who_decided(emailed, found_charge, olga, otto):
    path = alert_links(found_charge)["Mark failed"]
    found_charge.refresh_from_db()
    signed_in(otto).post(f"/effects/{found_charge.id}/decide/confirm", {
        "version": found_charge.version, "confirm": "on", "reason": "seen at the bank",
        "provider_ref": "ch_42", "evidence": "bank statement"})  # fmt: skip

    late = signed_in(olga).get(path)

    assert late.status_code == 409
    assert "Already decided" in late.content.decode() and "otto" in late.content.decode()
    assert not UsedLink.objects.exists()


def test_without_links_the_email_is_as_before(emailed, found_charge):
    emailed.LEDGER_EMAIL_LINKS = False

    assert alert_links(found_charge) == {}
    assert "Decide (" not in mail.outbox[-1].body
