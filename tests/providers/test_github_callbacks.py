"""GitHub's signed webhook deliveries at POST /api/v1/callbacks/github: an `issues` delivery for
an opened issue carrying an effect's marker settles it; a forged, unsigned or replayed
delivery is refused with nothing written, whatever delivery id it wears; other events are
answered 200 and ignored; the old secret still signs while one rotates."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from django.test import Client

from devstack.providers.github import caller
from devstack.providers.github.hooks import signed_headers
from ledger.models import Effect, WebhookDelivery
from reconcilers.providers.github import marker
from tests.providers.github_support import REPO, TOOL, request

pytest_plugins = ["tests.providers.github_fixtures"]
pytestmark = pytest.mark.django_db

SECRET = "github-hook-secret-0123456789"
OLD_SECRET = "github-hook-secret-old-98765"
NOWHERE = "http://127.0.0.1:9/hook"  # the fake records the delivery it could not make


@pytest.fixture
def hooks(settings, github, issue_tool):
    """The ledger's GitHub secret, and the fake signing with it (delivering nowhere)."""
    settings.LEDGER_WEBHOOK_SECRETS = {"github": SECRET}
    settings.LEDGER_WEBHOOK_OLD_SECRETS = {"github": OLD_SECRET}
    github.http.post("/_sandbox/webhook", json={"url": NOWHERE, "secret": SECRET})
    return github


def in_doubt(alice, **asked: Any) -> dict[str, Any]:
    """An issue effect whose answer was lost: `unknown`."""
    effect = alice.intent(tool=TOOL, target=REPO, request={**request(), **asked}, claim=True)
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    return effect


def delivery_of(github, effect: dict[str, Any], body: str | None = None) -> dict[str, Any]:
    """Open the effect's issue through PyGithub; the signed delivery the fake made of it."""
    caller.send(github.url, effect, {**request(), **({"body": body} if body else {})}, "")
    made = github.wait_for(lambda: github.http.get("/_sandbox/deliveries").json()["data"])
    return made[-1]


def post(body: str | bytes, headers: dict[str, str]):
    raw = body.encode() if isinstance(body, str) else body
    return Client().post(
        "/api/v1/callbacks/github",
        data=raw,
        content_type="application/json",
        headers={k: v for k, v in headers.items() if k != "Content-Type"},
    )


def test_the_fakes_delivery_settles_the_effect_and_its_replays_are_refused(
    hooks, live_server, alice
):
    effect = in_doubt(alice)
    url = f"{live_server.url}/api/v1/callbacks/github"
    hooks.http.post("/_sandbox/webhook", json={"url": url, "secret": SECRET})

    sent = delivery_of(hooks, effect)
    replayed = httpx.post(url, content=sent["body"], headers=sent["headers"])
    renamed = {**sent["headers"], "X-GitHub-Delivery": str(uuid.uuid4())}
    under_a_new_id = httpx.post(url, content=sent["body"], headers=renamed)

    [issue] = hooks.transactions()
    stored = Effect.objects.get(pk=effect["id"])
    assert sent["status"] == 200 and sent["headers"]["X-GitHub-Event"] == "issues"
    assert (stored.status, stored.provider_ref) == ("confirmed", issue["node_id"])
    assert (replayed.status_code, under_a_new_id.status_code) == (401, 401)
    assert WebhookDelivery.objects.filter(provider="github").count() == 1


def test_a_delivery_signed_with_the_old_secret_is_taken_while_it_rotates(hooks, alice):
    effect = in_doubt(alice)
    hooks.http.post("/_sandbox/webhook", json={"url": NOWHERE, "secret": OLD_SECRET})
    sent = delivery_of(hooks, effect)

    answer = post(sent["body"], sent["headers"])

    assert answer.status_code == 200, answer.content
    assert answer.json() == {"settled": [effect["id"]], "ignored": 0}


@pytest.mark.parametrize(
    "forgery",
    ["wrong-secret", "no-signature", "sha1-only", "no-delivery-id", "body-changed"],
)
def test_a_forged_delivery_is_refused_with_nothing_written(hooks, alice, forgery):
    effect = in_doubt(alice)
    sent = delivery_of(hooks, effect)
    body, headers = sent["body"], dict(sent["headers"])
    if forgery == "wrong-secret":
        headers = signed_headers("not-the-secret", body.encode(), "issues", str(uuid.uuid4()))
    elif forgery in ("no-signature", "sha1-only"):
        del headers["X-Hub-Signature-256"]
    elif forgery == "no-delivery-id":
        del headers["X-GitHub-Delivery"]
    if forgery == "no-signature":
        del headers["X-Hub-Signature"]
    if forgery == "body-changed":
        body = body.replace('"opened"', '"opened" ', 1)

    answer = post(body, headers)

    assert answer.status_code == 401
    assert not WebhookDelivery.objects.exists()
    assert Effect.objects.get(pk=effect["id"]).status == "unknown"


def _event(github, event: str, payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    return body, signed_headers(SECRET, body, event, str(uuid.uuid4()))


def test_other_events_are_answered_and_ignored(hooks, alice):
    effect = in_doubt(alice)
    sent = delivery_of(hooks, effect)
    opened = json.loads(sent["body"])
    issue, repository = opened["issue"], opened["repository"]
    pull = {**issue, "pull_request": {"url": "https://api.github.com/pulls/1"}}
    unmarked = {**issue, "body": "no marker"}
    events = [
        ("ping", {"zen": "Keep it logically awesome.", "hook_id": 1}),
        ("issues", {"action": "edited", "issue": issue, "repository": repository}),
        ("issues", {"action": "closed", "issue": issue, "repository": repository}),
        ("issue_comment", {"action": "created", "issue": issue, "comment": {"id": 1}}),
        ("issues", {"action": "opened", "issue": pull, "repository": repository}),
        ("issues", {"action": "opened", "issue": unmarked, "repository": repository}),
    ]

    answers = [post(*_event(hooks, name, payload)) for name, payload in events]

    assert [a.status_code for a in answers] == [200] * len(events)
    assert all(a.json() == {"settled": [], "ignored": 0} for a in answers)
    assert Effect.objects.get(pk=effect["id"]).status == "unknown"


def test_a_marker_forged_in_an_agents_body_settles_only_the_agents_own_effect(hooks, alice):
    victim = in_doubt(alice)
    forger = alice.intent(
        tool=TOOL, target=REPO, request={**request(), "title": "x"}, claim=True, step_id="forger"
    )
    alice.outcome(forger["id"], forger["lease_token"], "unknown")
    forged = f"Closing.\n{marker.marker(victim['idempotency_key'], victim['id'])}"

    sent = delivery_of(hooks, forger, body=forged)
    answer = post(sent["body"], sent["headers"])

    assert answer.json() == {"settled": [forger["id"]], "ignored": 0}
    assert Effect.objects.get(pk=victim["id"]).status == "unknown"
    assert Effect.objects.get(pk=forger["id"]).status == "confirmed"


def test_a_body_that_is_not_json_is_refused_after_its_signature(hooks):
    body = b"<html>not json</html>"

    answer = post(body, signed_headers(SECRET, body, "issues", str(uuid.uuid4())))

    assert answer.status_code == 422
    assert not WebhookDelivery.objects.exists()
