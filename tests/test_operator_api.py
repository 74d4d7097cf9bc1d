"""The operator API over HTTP (Django's test client, the whole middleware stack): a person's token
reads the queue and an item and takes decisions through the one decision service, under the
page's rules; every refusal is the documented JSON error and records no decision; every use of
a token is recorded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.utils import timezone

from ledger.models import Agent, Effect, Reason, ReviewItem, Team, Tool
from ledger.policy.teams import add_member
from reviews.access.counts import forget
from reviews.models import OperatorToken, OperatorTokenUse
from reviews.operatorapi.tokens import issue
from tests.factories import in_review, lookup_found, signed_in
from tests.helpers import assert_error

BASE = "/api/v1/operator"


class Operator:
    """Speaks the operator API as a script would: JSON over HTTP with a bearer token."""

    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = Client()

    def get(self, path: str, **params: Any):
        return self.http.get(f"{BASE}{path}", params, headers=self.headers)

    def decide(self, effect: Effect, action: str, **body: Any):
        effect.refresh_from_db()
        payload = {"action": action, "reason": "checked", "expected_version": effect.version}
        return self.http.post(
            f"{BASE}/effects/{effect.id}/decisions",
            json.dumps({**payload, **body}),
            content_type="application/json",
            headers=self.headers,
        )


def token_for(user: User, *scopes: str, teams: tuple[Team, ...] = ()) -> str:
    _, raw = issue(
        user, name="script", scopes=scopes or ("read", "decide"), teams=[t.pk for t in teams],
        days=30,
    )  # fmt: skip
    return raw


def decisions_on(effect: Effect) -> list[Effect]:
    return list(Effect.objects.filter(parent=effect, kind="decision"))


def untouched(effect: Effect) -> None:
    """Nothing recorded: no decision, the effect as it was, its item still open."""
    before = effect.status
    effect.refresh_from_db()
    assert effect.status == before and decisions_on(effect) == []
    assert ReviewItem.objects.filter(effect=effect, resolved_at__isnull=True).exists()


@pytest.fixture
def unknown(make_effect) -> Effect:
    effect = make_effect("unknown", attempt=1)
    in_review(effect)
    return effect


# --- Deciding --------------------------------------------------------------------------------


def test_a_decision_is_recorded_as_from_the_page_with_channel_api_and_the_token(olga, unknown):
    raw = token_for(olga)
    answer = Operator(raw).decide(unknown, "confirm", provider_ref="ch_9", evidence="dashboard")

    assert answer.status_code == 201, answer.content
    body = answer.json()
    assert (body["action"], body["channel"], body["status"]) == ("confirm", "api", "confirmed")
    [decision] = decisions_on(unknown)
    assert str(decision.id) == body["decision_id"]
    token = OperatorToken.objects.get()
    assert decision.provenance["actor"] == "operator:olga"
    assert decision.provenance["channel"] == "api"
    assert decision.provenance["via"] == f"token {token.pk} (elop_{token.prefix})"
    assert raw not in json.dumps(decision.provenance)
    item = ReviewItem.objects.get(effect=unknown)
    assert (item.resolved_by, item.decision_id) == (olga, decision.id)
    # Audited: the use is recorded with its token, and last_used_at moved.
    [use] = OperatorTokenUse.objects.filter(token=token)
    assert (use.method, use.path, use.outcome) == (
        "POST",
        f"{BASE}/effects/{unknown.id}/decisions",
        "ok",
    )
    token.refresh_from_db()
    assert token.last_used_at is not None
    assert answer["Cache-Control"].startswith("max-age=0") or "no-store" in answer["Cache-Control"]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"reason": ""}, "reason"), ({"evidence": ""}, "evidence"), ({"colour": "red"}, "colour")],
)
def test_an_incomplete_or_unknown_field_is_422_and_records_nothing(olga, unknown, body, field):
    fields = {"provider_ref": "ch_9", "evidence": "dashboard", **body}
    answer = Operator(token_for(olga)).decide(unknown, "confirm", **fields)
    assert field in assert_error(answer, 422, "validation_error")["fields"]
    untouched(unknown)


def test_a_decision_on_a_stale_version_is_409_already_decided(olga, otto, unknown):
    seen = unknown.version
    assert Operator(token_for(otto)).decide(unknown, "fail", evidence="bank").status_code == 201
    stale = Operator(token_for(olga)).http.post(
        f"{BASE}/effects/{unknown.id}/decisions",
        json.dumps({"action": "cancel", "reason": "late", "expected_version": seen}),
        content_type="application/json",
        headers={"Authorization": f"Bearer {token_for(olga)}"},
    )
    assert assert_error(stale, 409, "already_decided")["decided_by"] == "otto"
    assert [d.provenance["actor"] for d in decisions_on(unknown)] == ["operator:otto"]


def test_four_eyes_proposed_on_the_page_is_refused_to_its_proposer_and_taken_by_another(
    olga, otto, make_effect
):
    email = make_effect("unknown", tool="send_email", attempt=1)
    in_review(email, Reason.NO_LOOKUP)
    email.refresh_from_db()
    proposed = signed_in(olga).post(
        f"/effects/{email.id}/decide/retry",
        {
            "version": email.version,
            "reason": "never arrived",
            "evidence": "mail log: nothing sent",
            "verified_absent": "on",
            "confirm": "on",
        },
    )
    assert proposed.status_code == 302
    mine = Operator(token_for(olga))
    shown = mine.get(f"/effects/{email.id}").json()
    assert shown["four_eyes"] == {"waits": True, "asked_by": "olga", "yours": True}
    assert "approve" not in [a["action"] for a in shown["actions"]]

    refused = mine.decide(email, "approve")
    assert_error(refused, 409, "four_eyes")
    email.refresh_from_db()
    assert email.status == "unknown" and len(decisions_on(email)) == 1

    approved = Operator(token_for(otto)).decide(email, "approve")
    assert approved.status_code == 201, approved.content
    email.refresh_from_db()
    assert email.status == "planned"


# --- Reading ---------------------------------------------------------------------------------


def test_one_item_offers_the_decisions_and_the_suggestion_ready_to_send(olga, unknown):
    lookup_found(unknown, "ch_found")
    reader = Operator(token_for(olga))
    shown = reader.get(f"/effects/{unknown.id}")
    assert shown.status_code == 200, shown.content
    body = shown.json()
    assert body["effect"]["status"] == "unknown" and body["item"]["reason"] == Reason.INCONCLUSIVE
    offered = {a["action"]: a for a in body["actions"]}
    assert "confirm" in offered and offered["confirm"]["required"] == ["evidence", "provider_ref"]
    assert offered["confirm"]["preview"]["status"] == "confirmed"
    suggested = body["suggested"]
    assert suggested["action"] == "confirm"
    assert suggested["ask"]["provider_ref"] == "ch_found"
    assert suggested["ask"]["expected_version"] == body["effect"]["version"]

    sent = reader.http.post(
        f"{BASE}/effects/{unknown.id}/decisions",
        json.dumps(suggested["ask"]),
        content_type="application/json",
        headers=reader.headers,
    )
    assert sent.status_code == 201, sent.content
    unknown.refresh_from_db()
    assert (unknown.status, unknown.provider_ref) == ("confirmed", "ch_found")


def test_the_queue_pages_through_open_items_oldest_first(olga, make_effect):
    effects = [make_effect("unknown", attempt=1) for _ in range(3)]
    items = [in_review(e) for e in effects]
    resolved = in_review(make_effect("unknown", attempt=1))
    ReviewItem.objects.filter(pk=resolved.pk).update(resolved_at=timezone.now())
    reader = Operator(token_for(olga, "read"))

    first = reader.get("/queue", limit=2).json()
    second = reader.get("/queue", limit=2, cursor=first["next_cursor"]).json()

    listed = [row["item"] for row in first["items"] + second["items"]]
    assert listed == [i.pk for i in items]
    assert first["items"][0]["effect_id"] == str(effects[0].id)
    assert first["items"][0]["version"] == effects[0].version
    assert second["next_cursor"] is None


# --- Tokens refused --------------------------------------------------------------------------


def _backdate(token: OperatorToken) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE reviews_operatortoken SET created_at = now() - interval '2 days', "
            "expires_at = now() - interval '1 second' WHERE id = %s",
            [token.pk],
        )


@pytest.mark.parametrize("case", ["missing", "malformed", "unknown", "expired", "revoked"])
def test_a_missing_malformed_unknown_expired_or_revoked_token_is_401(olga, unknown, case):
    raw = token_for(olga)
    token = OperatorToken.objects.get()
    if case == "missing":
        raw = ""
    elif case == "malformed":
        raw = "nonsense"
    elif case == "unknown":
        raw = raw[:-4] + ("AAAA" if not raw.endswith("AAAA") else "BBBB")
    elif case == "expired":
        _backdate(token)
    else:
        signed_in(olga).post(f"/tokens/{token.pk}/revoke")

    caller = Operator(raw)
    for answer in (caller.get("/queue"), caller.decide(unknown, "fail", evidence="bank")):
        body = assert_error(answer, 401, "unauthorized")
        assert "operator token" in body["detail"]
    untouched(unknown)
    uses = list(OperatorTokenUse.objects.values_list("outcome", flat=True))
    assert uses == ([case, case] if case in ("expired", "revoked") else [])
    token.refresh_from_db()
    assert token.last_used_at is None


def test_an_agent_key_opens_nothing_here_and_a_token_nothing_of_the_agent_api(alice, olga, unknown):
    by_key = Operator(alice.key)
    assert_error(by_key.get("/queue"), 401, "unauthorized")
    assert_error(by_key.decide(unknown, "fail", evidence="bank"), 401, "unauthorized")
    raw = token_for(olga)
    as_agent = Client().get("/api/v1/effects", headers={"Authorization": f"Bearer {raw}"})
    assert_error(as_agent, 401, "unauthorized")
    untouched(unknown)


def test_a_token_is_refused_what_its_scopes_do_not_cover(olga, unknown):
    reader, decider = Operator(token_for(olga, "read")), Operator(token_for(olga, "decide"))
    body = assert_error(reader.decide(unknown, "fail", evidence="bank"), 403, "insufficient_scope")
    assert body["scope"] == "decide"
    assert_error(decider.get("/queue"), 403, "insufficient_scope")
    assert_error(decider.get(f"/effects/{unknown.id}"), 403, "insufficient_scope")
    untouched(unknown)
    outcomes = list(OperatorTokenUse.objects.values_list("outcome", flat=True))
    assert outcomes == ["insufficient_scope"] * 3


@pytest.mark.parametrize("loss", ["role", "deactivated"])
def test_a_person_who_lost_the_role_or_was_deactivated_opens_nothing(olga, unknown, loss):
    caller = Operator(token_for(olga))
    if loss == "role":
        olga.groups.remove(Group.objects.get(name="operator"))
    else:
        User.objects.filter(pk=olga.pk).update(is_active=False)

    assert_error(caller.get("/queue"), 403, "not_an_operator")
    assert_error(caller.decide(unknown, "fail", evidence="bank"), 403, "not_an_operator")
    untouched(unknown)
    assert set(OperatorTokenUse.objects.values_list("outcome", flat=True)) == {"not_an_operator"}


# --- Teams -----------------------------------------------------------------------------------


@pytest.fixture
def teams(olga, tools) -> dict[str, Team]:
    """Payments owns charge_card, support owns send_email; olga is in both."""
    payments = Team.objects.create(name="Payments", slug="payments")
    support = Team.objects.create(name="Support", slug="support")
    Tool.objects.filter(name="charge_card").update(team=payments)
    Tool.objects.filter(name="send_email").update(team=support)
    add_member(olga, payments)
    add_member(olga, support)
    forget()
    return {"payments": payments, "support": support}


def test_another_teams_effect_is_not_listed_not_shown_and_not_decided(
    olga, otto, teams, unknown, make_effect
):
    email = make_effect("unknown", tool="send_email", attempt=1)
    in_review(email)
    # otto is in payments only; olga's token is narrowed to payments.
    add_member(otto, teams["payments"])
    for raw in (token_for(otto), token_for(olga, teams=(teams["payments"],))):
        caller = Operator(raw)
        listed = [row["effect_id"] for row in caller.get("/queue").json()["items"]]
        assert listed == [str(unknown.id)]
        assert_error(caller.get(f"/effects/{email.id}"), 404, "not_found")
        assert_error(caller.decide(email, "fail", evidence="bank"), 403, "outside_teams")
    untouched(email)
    # olga's own teams reach it, with a token that names none.
    assert Operator(token_for(olga)).decide(email, "fail", evidence="bank").status_code == 201


def test_the_document_declares_the_token_scheme_beside_the_agent_key():
    schema = Client().get("/api/v1/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert schemes["OperatorToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schemes["OperatorToken"]["description"],
    }
    assert "AgentKey" in schemes
    operations = {
        op["operationId"]: op
        for path in schema["paths"].values()
        for op in path.values()
        if op["operationId"] in ("listReviewQueue", "getOperatorItem", "decideOnEffect")
    }
    assert len(operations) == 3
    assert all(op["security"] == [{"OperatorToken": []}] for op in operations.values())
    assert "/api/v1/operator/effects/{effect_id}/decisions" in schema["paths"]


def test_agents_of_no_team_stay_everyones(olga, teams, make_effect):
    Agent.objects.update(team=None)
    Tool.objects.filter(name="create_ticket").update(team=None)
    ticket = make_effect("unknown", tool="create_ticket", attempt=1)
    in_review(ticket)
    caller = Operator(token_for(olga, teams=(teams["support"],)))
    assert [r["effect_id"] for r in caller.get("/queue").json()["items"]] == [str(ticket.id)]
