"""The Stripe adapter against the payments sandbox's Stripe face, through the official `stripe`
SDK: what the face answers is what the SDK parses; the lookup (Stripe's search, else a list by
creation range, every page, then our metadata) finds, counts two as a duplicate, proves absence
only from a complete listing and doubts everything else (its search and its range:
test_stripe_search); list_window lists what was sent; refunds the ledger sends
are keyed and a lost answer is unknown; loadtools refuses what the adapter cannot back."""

from __future__ import annotations

import base64
import tempfile
from pathlib import Path

import httpx
import pytest
import stripe
from django.utils import timezone

from devstack.providers.stripe import caller
from ledger.models import Tool
from reconcilers.providers import adapter_for
from tests.providers import stripe_examples
from tests.providers.stripe_support import (
    CHARGE,
    TARGET,
    declare,
    objects,
    pay,
    stripe_settings,
)

pytest_plugins = ["tests.providers.stripe_support"]
pytestmark = pytest.mark.django_db


def sdk(sandbox, key: str = caller.API_KEY) -> stripe.StripeClient:
    return stripe.StripeClient(key, base_addresses={"api": sandbox.url}, max_network_retries=0)


def intent_params(key: str, amount: int = 1099) -> dict:
    return {
        "amount": amount,
        "currency": "eur",
        "confirm": True,
        "payment_method": "pm_card_visa",
        "metadata": {"ledger_key": key, "ledger_effect": "e-1"},
    }


def adapter_for_tool(effect):
    return adapter_for(Tool.objects.get(name=effect.tool))


def declare_paged(sandbox, **config):
    """The Stripe tool with more configuration, declared again as loadtools does."""
    return declare(Path(tempfile.mkdtemp()), sandbox.url, config=config)


# --- the face speaks Stripe ---------------------------------------------------------------------


def test_a_keyed_payment_is_made_once_and_replayed_as_stripe_does(stripe_sandbox):
    client = sdk(stripe_sandbox)
    first = client.v1.payment_intents.create(
        params=intent_params("k-1"), options={"idempotency_key": "k-1"}
    )
    again = client.v1.payment_intents.create(
        params=intent_params("k-1"), options={"idempotency_key": "k-1"}
    )

    assert isinstance(first, stripe.PaymentIntent)
    assert (first.status, first.amount, first.currency) == ("succeeded", 1099, "eur")
    assert first.amount_received == 1099 and first.latest_charge.startswith("ch_")
    assert first.metadata["ledger_key"] == "k-1"
    assert again.id == first.id
    assert again.last_response.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.last_response.headers
    with pytest.raises(stripe.IdempotencyError) as refused:
        client.v1.payment_intents.create(
            params=intent_params("k-1", amount=5), options={"idempotency_key": "k-1"}
        )
    assert refused.value.http_status == 400
    assert [item["id"] for item in objects(stripe_sandbox)] == [first.id]


def test_the_faces_raw_answers_are_what_the_sdk_builds_its_objects_from(stripe_sandbox):
    headers = {"Authorization": f"Bearer {caller.API_KEY}"}
    made = httpx.post(
        f"{stripe_sandbox.url}/v1/payment_intents",
        content="amount=500&currency=usd&confirm=true&payment_method=pm_card_visa"
        "&metadata[ledger_key]=raw-1",
        headers={**headers, "Content-Type": "application/x-www-form-urlencoded"},
    )
    listed = httpx.get(f"{stripe_sandbox.url}/v1/payment_intents?limit=1", headers=headers)

    assert made.status_code == 200 and made.headers["Request-Id"].startswith("req_")
    intent = stripe.PaymentIntent.construct_from(made.json(), caller.API_KEY)
    page = stripe.ListObject.construct_from(listed.json(), caller.API_KEY)
    assert intent.metadata.ledger_key == "raw-1" and intent.object == "payment_intent"
    assert isinstance(page.data[0], stripe.PaymentIntent) and page.data[0].id == intent.id
    assert page.url == "/v1/payment_intents" and page.has_more is False


def test_the_faces_objects_have_the_fields_of_stripes_own_examples(stripe_sandbox):
    client = sdk(stripe_sandbox)
    intent = client.v1.payment_intents.create(params=intent_params("ex-1"))
    client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 100})
    events = stripe_sandbox.http.get("/_sandbox/stripe/events").json()["data"]

    [stored_intent] = objects(stripe_sandbox)
    [stored_refund] = objects(stripe_sandbox, "refund")
    assert set(stored_intent) == stripe_examples.PAYMENT_INTENT
    assert set(stored_refund) == stripe_examples.REFUND
    assert events and all(set(event) == stripe_examples.EVENT for event in events)
    # And what the SDK builds from them carries every field.
    retrieved = client.v1.payment_intents.retrieve(intent.id).to_dict()
    assert set(retrieved) == stripe_examples.PAYMENT_INTENT


def test_a_declined_card_is_a_card_error_naming_its_payment_intent(stripe_sandbox):
    with pytest.raises(stripe.CardError) as declined:
        sdk(stripe_sandbox).v1.payment_intents.create(
            params={**intent_params("k-2"), "payment_method": "pm_card_chargeDeclined"}
        )

    assert declined.value.http_status == 402 and declined.value.code == "card_declined"
    assert declined.value.error.payment_intent.status == "requires_payment_method"
    events = stripe_sandbox.http.get("/_sandbox/stripe/events").json()["data"]
    assert [e["type"] for e in events] == [
        "payment_intent.created",
        "payment_intent.payment_failed",
    ]


def test_only_a_test_secret_key_opens_the_face(stripe_sandbox):
    with pytest.raises(stripe.AuthenticationError) as live:
        sdk(stripe_sandbox, "sk_live_not_here").v1.payment_intents.list()
    bare = httpx.get(f"{stripe_sandbox.url}/v1/payment_intents")
    basic = base64.b64encode(f"{caller.API_KEY}:".encode()).decode()
    by_basic = httpx.get(
        f"{stripe_sandbox.url}/v1/payment_intents", headers={"Authorization": f"Basic {basic}"}
    )
    with pytest.raises(stripe.PermissionError):
        sdk(stripe_sandbox, "rk_test_reads_only").v1.payment_intents.create(
            params=intent_params("k-3")
        )

    assert live.value.http_status == 401
    assert bare.status_code == 401 and bare.json()["error"]["type"] == "invalid_request_error"
    assert by_basic.status_code == 200 and by_basic.json()["object"] == "list"
    assert sdk(stripe_sandbox, "rk_test_reads_only").v1.payment_intents.list().data == []


def test_lists_page_newest_first_within_a_creation_range(stripe_sandbox):
    client = sdk(stripe_sandbox)
    made = [client.v1.payment_intents.create(params=intent_params(f"p-{n}")).id for n in range(5)]
    now = int(timezone.now().timestamp())

    page = client.v1.payment_intents.list(params={"limit": 2, "created": {"gte": now - 60}})
    every = [i.id for i in page.auto_paging_iter()]
    later = client.v1.payment_intents.list(params={"created": {"gt": now + 60}})

    assert page.has_more is True and len(page.data) == 2
    assert every == list(reversed(made))
    assert later.data == []
    with pytest.raises(stripe.InvalidRequestError):
        client.v1.payment_intents.list(params={"limit": 101})


def test_refunds_never_exceed_the_payment(stripe_sandbox):
    client = sdk(stripe_sandbox)
    intent = client.v1.payment_intents.create(params=intent_params("r-1"))
    part = client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 99})
    rest = client.v1.refunds.create(params={"charge": intent.latest_charge})

    assert isinstance(part, stripe.Refund) and part.status == "succeeded"
    assert (part.amount, rest.amount) == (99, 1000) and rest.payment_intent == intent.id
    with pytest.raises(stripe.InvalidRequestError) as none_left:
        client.v1.refunds.create(params={"payment_intent": intent.id, "amount": 1})
    assert none_left.value.code == "charge_already_refunded"
    listed = client.v1.refunds.list(params={"payment_intent": intent.id})
    assert [r.id for r in listed.data] == [rest.id, part.id]


# --- lookup -------------------------------------------------------------------------------------


def test_a_payment_is_found_by_its_metadata_and_matches_the_request(stripe_sandbox, make_payment):
    effect = make_payment()
    sent = pay(stripe_sandbox, effect)

    answer = adapter_for_tool(effect).lookup(effect)

    assert sent["status"] == "confirmed"
    assert (answer.outcome, answer.status, answer.provider_ref) == (
        "found",
        "confirmed",
        sent["provider_ref"],
    )
    # Named by Stripe's search: an answer, not a complete list.
    assert answer.mismatches == () and not answer.listed


def test_what_stripe_recorded_otherwise_is_a_mismatch(stripe_sandbox, make_payment):
    effect = make_payment()
    pay(stripe_sandbox, effect, amount="10.98", currency="EUR")
    other = make_payment(target="cus_someone_else")
    pay(stripe_sandbox, other)
    other.target = TARGET  # what the ledger holds differs from what travelled

    assert adapter_for_tool(effect).lookup(effect).mismatches == ("amount",)
    assert adapter_for_tool(other).lookup(other).mismatches == ("target",)


def test_absence_is_proven_only_by_a_complete_listing(stripe_sandbox, make_payment):
    effect = make_payment()
    for _ in range(5):  # other payments, in pages of two
        pay(stripe_sandbox, make_payment())
    tool = declare_paged(stripe_sandbox, page_size=2)

    answer = adapter_for(tool).lookup(effect)
    cut_short = adapter_for(declare_paged(stripe_sandbox, page_size=2, max_pages=2)).lookup(effect)

    assert (answer.outcome, answer.listed) == ("not_found", True)
    assert cut_short.outcome == "inconclusive" and "more than 2 pages" in cut_short.detail


def test_one_found_on_a_later_page_and_two_are_a_duplicate(stripe_sandbox, make_payment):
    effect, twice = make_payment(), make_payment()
    pay(stripe_sandbox, effect)
    for _ in range(4):
        pay(stripe_sandbox, make_payment())
    pay(stripe_sandbox, twice, "ignore_keys")
    pay(stripe_sandbox, twice, "ignore_keys")  # a provider that forgot the key: charged twice
    tool = declare_paged(stripe_sandbox, page_size=2, search=False)

    found = adapter_for(tool).lookup(effect)
    doubled = adapter_for(tool).lookup(twice)

    assert found.outcome == "found" and found.status == "confirmed"
    assert doubled.outcome == "duplicate" and len(doubled.refs) == 2
    keyed = [
        i for i in objects(stripe_sandbox) if i["metadata"]["ledger_key"] == twice.idempotency_key
    ]
    assert set(doubled.refs) == {i["id"] for i in keyed}


def test_a_declined_payment_is_found_failed(stripe_sandbox, make_payment):
    effect = make_payment()
    sent = pay(stripe_sandbox, effect, payment_method="pm_card_chargeDeclined", **CHARGE)

    answer = adapter_for_tool(effect).lookup(effect)

    assert sent["status"] == "failed"
    assert (answer.outcome, answer.status) == ("found", "failed")


@pytest.mark.parametrize(
    ("faults", "knobs", "said"),
    [
        ({"fail5xx": 503}, {}, "Stripe answered 503"),
        ({"garbage": True}, {}, "could not be read"),
        ({"wrong_types": True}, {}, ""),
        ({}, {"truncate": 1}, "APIError"),
        ({}, {"rate_limit": 1}, "Stripe answered 429"),
        ({"hang": 1.5}, {}, "no answer from Stripe"),
    ],
    ids=["5xx", "html", "unexpected-shape", "truncated", "429", "timeout"],
)
def test_anything_short_of_a_whole_answer_is_inconclusive(
    stripe_sandbox, make_payment, faults, knobs, said
):
    effect = make_payment()
    # The listing alone: what search's failures lead to is in test_stripe_search.
    tool = declare_paged(stripe_sandbox, timeout=0.5, search=False)
    if faults:
        stripe_sandbox.set_faults(methods=("GET",), **faults)
    if knobs:
        stripe_settings(stripe_sandbox, **knobs)

    answer = adapter_for(tool).lookup(effect)

    assert answer.outcome == "inconclusive", answer
    assert said in answer.detail
    if "rate_limit" in knobs:
        assert answer.retry_after == 1.0


def test_a_record_with_our_key_under_another_effect_is_not_taken_as_ours(
    stripe_sandbox, make_payment
):
    effect = make_payment()
    labels = {"idempotency_key": effect.idempotency_key, "id": "another-effect"}
    caller.send(stripe_sandbox.url, labels, CHARGE, "")

    answer = adapter_for_tool(effect).lookup(effect)

    assert answer.outcome == "inconclusive" and "another effect" in answer.detail


def test_a_key_of_the_other_mode_is_refused_before_any_call(
    stripe_sandbox, make_payment, monkeypatch, tmp_path
):
    effect = make_payment()
    pay(stripe_sandbox, effect)
    live = declare(
        tmp_path, stripe_sandbox.url, "charge_live", mode="live", config={"api_key_env": "LIVE_KEY"}
    )
    monkeypatch.setenv("LIVE_KEY", caller.API_KEY)

    answer = adapter_for(live).lookup(effect)
    monkeypatch.delenv(caller.API_KEY_ENV)
    unset = adapter_for_tool(effect).lookup(effect)

    assert answer.outcome == "inconclusive"
    assert "LIVE_KEY holds a test-mode key" in answer.detail
    assert unset.outcome == "inconclusive" and caller.API_KEY_ENV in unset.detail


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/payment_intents", "amount=abc&currency=eur"),
        ("POST", "/v1/payment_intents", "amount=100&currency=euro"),
        ("POST", "/v1/payment_intents", "amount[x]=1&currency=eur"),
        ("POST", "/v1/payment_intents", "amount=100&currency=eur&metadata[a][b]=c"),
        ("POST", "/v1/payment_intents", "amount=100&currency=eur&colour=red"),
        ("POST", "/v1/payment_intents", "amount=100&currency=eur&confirm=true"),
        ("POST", "/v1/payment_intents", b"\xff\xfe=\x00"),
        ("POST", "/v1/payment_intents/pi_missing/confirm", ""),
        ("POST", "/v1/refunds", "amount=5"),
        ("POST", "/v1/refunds", "payment_intent=pi_missing"),
        ("GET", "/v1/payment_intents?created[gte]=yesterday", ""),
        ("GET", "/v1/payment_intents?starting_after=pi_missing", ""),
        ("GET", "/v1/refunds?colour=red", ""),
        ("PUT", "/v1/payment_intents", ""),
    ],
)
def test_bad_requests_are_stripe_errors_never_a_500(stripe_sandbox, method, path, body):
    answer = httpx.request(
        method,
        f"{stripe_sandbox.url}{path}",
        content=body,
        headers={
            "Authorization": f"Bearer {caller.API_KEY}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
    )

    assert 400 <= answer.status_code < 500, answer.text
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert objects(stripe_sandbox) == []
