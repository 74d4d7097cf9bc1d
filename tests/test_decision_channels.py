"""One decision service, five channels (issue 33): every decision kind is taken from the page,
from Slack, from an alert email's link, through the operator API and with `manage.py decide`,
each on an effect of its own in the same situation, and the five recorded decisions are compared.
They must agree on everything but the channel: the decision effect, the target's move, the
review item closed, the compensation created. A channel that skipped a rule, or carried
something out its own way, would record something else.

Each channel is driven as its users drive it: the page's form over HTTP, Slack's signed
payloads from the fake Slack process to the live server, the email's link followed after
sign-in and then the page's form, the API with a person's token, the command line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from io import StringIO
from typing import Any

import pytest
from django.core import mail
from django.core.management import call_command
from django.test import Client

from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.decisions.kinds import KINDS
from reviews.operatorapi.tokens import issue
from tests.factories import lookup, signed_in
from tests.slack_interactive import alert_on, link_slack

pytest_plugins = ["tests.slack_app"]
pytestmark = pytest.mark.django_db(transaction=True)

CHANNELS = ["page", "slack", "email", "api", "command"]
SLACK_USER = "U0OLGA0001"
# "  Not a duplicate: same charge: https://…/links/…": a label may hold a colon itself.
LINK = re.compile(r"^  (?P<label>.+): https://ledger\.example\.com(?P<path>/links/\S+)$")


@dataclass(frozen=True)
class Case:
    """A decision kind, the situation it is offered in, and what the operator fills in."""

    action: str
    status: str
    reason: Reason
    effect: dict[str, Any]
    fields: dict[str, str]
    found: str = ""  # a lookup found the charge under this reference, for another amount


CASES = [
    Case("confirm", "unknown", Reason.INCONCLUSIVE, {"attempt": 1},
         {"provider_ref": "ch_9", "evidence": "seen in the provider's dashboard"}),
    Case("fail", "unknown", Reason.INCONCLUSIVE, {"attempt": 1},
         {"evidence": "the bank declined it"}),
    Case("retry", "unknown", Reason.INCONCLUSIVE, {"attempt": 1}, {}),
    Case("cancel", "planned", Reason.ATTEMPTS_EXHAUSTED, {"attempt": 3}, {}),
    Case("extra_attempt", "unknown", Reason.ATTEMPTS_EXHAUSTED, {"attempt": 3}, {}),
    Case("not_duplicate", "confirmed", Reason.DUPLICATE, {"provider_ref": "ch_1"},
         {"evidence": "one charge at the provider, ch_1"}),
    Case("accept_record", "unknown", Reason.MISMATCH, {"attempt": 1},
         {"evidence": "their record says 1.10"}, found="ch_7"),
    Case("compensate", "confirmed", Reason.DUPLICATE,
         {"tool": "send_email", "provider_ref": "msg_1"},
         {"compensation_tool": "send_email",
          "compensation_request": '{"body": "Please ignore our last message."}'}),
    Case("approve", "awaiting_approval", Reason.APPROVAL_REQUIRED, {}, {}),
    Case("reject", "awaiting_approval", Reason.APPROVAL_REQUIRED, {}, {}),
]  # fmt: skip
REASON = "checked with the provider"


def test_the_table_holds_every_decision_kind():
    assert {case.action for case in CASES} == set(KINDS)


def _situation(make_effect: Callable[..., Effect], case: Case) -> Effect:
    effect = make_effect(case.status, **case.effect)
    if case.found:
        record = {"id": case.found, "amount": "1.10", "currency": "EUR", "status": "confirmed"}
        lookup(effect, "found", provider_ref=case.found, status="confirmed", record=record,
               mismatches=["amount"])  # fmt: skip
    open_review(effect.id, case.reason)
    effect.refresh_from_db()
    return effect


def _form(effect: Effect, case: Case) -> dict[str, str]:
    return {"version": str(effect.version), "confirm": "on", "reason": REASON, **case.fields}


def _by_page(effect: Effect, case: Case, context: dict[str, Any]) -> None:
    answer = signed_in(context["olga"]).post(
        f"/effects/{effect.id}/decide/{case.action}", _form(effect, case)
    )
    assert answer.status_code == 302, answer.content[:2000]


def _by_email(effect: Effect, case: Case, context: dict[str, Any]) -> None:
    alert_on(effect, case.reason)
    body = mail.outbox[-1].body
    links = {m["label"]: m["path"] for line in body.splitlines() if (m := LINK.match(line))}
    label = KINDS[case.action].label
    found = [p for said, p in links.items() if said in (label, f"{label} (suggested)")]
    assert len(found) == 1, (label, links)
    [path] = found
    browser = signed_in(context["olga"])
    followed = browser.get(path)
    assert followed.status_code == 302, followed.content[:2000]
    assert f"decide={case.action}" in followed["Location"]
    effect.refresh_from_db()
    answer = browser.post(f"/effects/{effect.id}/decide/{case.action}", _form(effect, case))
    assert answer.status_code == 302, answer.content[:2000]


def _by_slack(effect: Effect, case: Case, context: dict[str, Any]) -> None:
    slack = context["slack"]
    alert_on(effect, case.reason)
    views_before = len(slack.state()["views"])
    pressed = slack.press(case.action, SLACK_USER)
    assert pressed["status"] == 200, pressed
    if len(slack.state()["views"]) > views_before:  # the page asks for something: a modal
        done = slack.submit({"reason": REASON, **case.fields}, SLACK_USER)
        assert done["json"] == {"response_action": "clear"}, done


def _by_api(effect: Effect, case: Case, context: dict[str, Any]) -> None:
    body: dict[str, Any] = {"action": case.action, "reason": REASON}
    body["expected_version"] = effect.version
    for name, value in case.fields.items():
        body[name] = json.loads(value) if name == "compensation_request" else value
    answer = Client().post(
        f"/api/v1/operator/effects/{effect.id}/decisions",
        json.dumps(body),
        content_type="application/json",
        headers={"Authorization": f"Bearer {context['token']}"},
    )
    assert answer.status_code in (200, 201), answer.content[:2000]


def _by_command(effect: Effect, case: Case, context: dict[str, Any]) -> None:
    options = [f"--{name.replace('_', '-')}={value}" for name, value in case.fields.items()]
    call_command(
        "decide", str(effect.id), case.action, "--reason", REASON, "--as", "olga", *options,
        stdout=StringIO(),
    )  # fmt: skip


BY = {
    "page": _by_page,
    "slack": _by_slack,
    "email": _by_email,
    "api": _by_api,
    "command": _by_command,
}


# Typed text: the page pre-fills the suggested decision's reason and evidence, and Slack records
# a suggestion that needs nothing more at one press with that text; the other channels send what
# the test typed. Each is checked on its own (`typed`).
TEXT = {"reason", "evidence"}


def recorded(effect: Effect) -> dict[str, Any]:
    """What the decision on `effect` recorded, without what differs between two effects and
    two channels (ids, versions, times, the channel itself and its own provenance, the text)."""
    effect.refresh_from_db()
    [decision] = Effect.objects.filter(parent=effect, kind="decision")
    differs = {"channel", "via", "before", "after", "review_item", "compensation", "user_id"}
    differs |= TEXT | {k for k in decision.provenance if k.endswith("_event")}  # an event's id
    item = ReviewItem.objects.filter(effect=effect).order_by("-id").first()
    follow_up = Effect.objects.filter(parent=effect, kind="compensation").first()
    return {
        "decision": (decision.status, decision.tool, decision.target.split(":")[0]),
        "provenance": {k: v for k, v in decision.provenance.items() if k not in differs},
        "asked": {
            k: v for k, v in decision.request.items() if k not in {"expected_version", *TEXT}
        },
        "target": (effect.status, effect.provider_ref, effect.attempt, effect.max_attempts),
        "item": (item.reason, item.resolved_at is not None, item.resolved_by_id) if item else None,
        "follow_up": (follow_up.status, follow_up.tool, follow_up.request) if follow_up else None,
    }


@pytest.fixture
def channels(slack, settings, mailoutbox, olga) -> dict[str, Any]:
    """Every channel ready for olga: linked in Slack, alerts also emailed, a token of hers."""
    settings.LEDGER_ALERT_EMAILS = ["ops@example.com"]
    settings.LEDGER_ALERT_LINK_BASE = "https://ledger.example.com"
    settings.LEDGER_EMAIL_LINKS = True
    link_slack(olga, SLACK_USER)
    _, token = issue(olga, name="table", scopes=("read", "decide"), teams=[], days=1)
    return {"olga": olga, "slack": slack, "token": token}


@pytest.mark.parametrize("case", CASES, ids=[case.action for case in CASES])
def test_every_channel_records_the_same_decision(case, channels, make_effect, tools):
    records = {}
    for channel in CHANNELS:
        effect = _situation(make_effect, case)
        BY[channel](effect, case, channels)
        [decision] = Effect.objects.filter(parent=effect, kind="decision")
        assert decision.provenance["channel"] == channel
        typed = {"reason": REASON, "evidence": case.fields.get("evidence", "")}
        text = {name: decision.request[name] for name in TEXT}
        # Slack's one press takes the suggestion's text, as the page's pre-filled form does.
        assert text == typed or (channel == "slack" and text["reason"]), (channel, text)
        records[channel] = recorded(effect)

    page = records["page"]
    assert page["provenance"]["action"] in (case.action, "propose_retry")
    assert page["item"] is None or page["item"][1] or case.action == "reject"
    for channel in CHANNELS[1:]:
        assert records[channel] == page, (channel, _differences(records[channel], page))


def _differences(one: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    found = {}
    for key in one.keys() | other.keys():
        a, b = one.get(key), other.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found.update({f"{key}.{k}": v for k, v in _differences(a, b).items()})
        elif a != b:
            found[key] = (a, b)
    return found
