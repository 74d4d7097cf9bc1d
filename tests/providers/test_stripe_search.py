"""The Stripe adapter's search and its listing's range, against the sandbox's Stripe face through
the official SDK: the face answers `GET /v1/payment_intents/search` in Stripe's shape and lags
as Stripe's index does; a lookup settles on what search shows (each intent read again by id)
without listing, and lists (which alone proves absence) whenever search shows nothing it can
settle on; the listing reads creation times around the effect's dispatch, not up to now."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest
import stripe
from django.utils import timezone

from devstack.providers.stripe import caller
from ledger.models import RestoreWindow
from ledger.policy.toolfile import ToolFileError
from ledger.rules.events import record_event
from reconcilers.providers import adapter_for
from reconcilers.providers.stripe import search
from reconcilers.providers.stripe.calls import Failure
from tests.providers.stripe_support import CHARGE, declare, pay, stripe_settings

pytest_plugins = ["tests.providers.stripe_support"]
pytestmark = pytest.mark.django_db

SEARCH = "/v1/payment_intents/search"


def sdk(sandbox) -> stripe.StripeClient:
    return stripe.StripeClient(
        caller.API_KEY, base_addresses={"api": sandbox.url}, max_network_retries=0
    )


def made(sandbox, key: str, **metadata: str) -> str:
    """A confirmed PaymentIntent carrying `key` (and `metadata`): its id."""
    params = {
        "amount": 1099,
        "currency": "eur",
        "confirm": True,
        "payment_method": "pm_card_visa",
        "metadata": {"ledger_key": key, **metadata},
    }
    return sdk(sandbox).v1.payment_intents.create(params=params).id


def served(sandbox) -> dict[str, int]:
    """The requests each of the face's endpoints was sent, by `kind.endpoint`."""
    answer = sandbox.http.get("/_sandbox/stripe/requests")
    answer.raise_for_status()
    return answer.json()


def raw_search(sandbox, **params: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {caller.API_KEY}"}
    return httpx.get(f"{sandbox.url}{SEARCH}", params=params, headers=headers)


def looked_up(sandbox, tmp_path, effect, **config):
    """The effect looked up by the Stripe tool declared with `config` added, as loadtools does."""
    tool = declare(tmp_path, sandbox.url, config=config)
    return adapter_for(tool).lookup(effect)


# --- the face's search ----------------------------------------------------------------------------


def test_the_faces_search_answers_in_stripes_shape_a_page_at_a_time(stripe_sandbox):
    older, newer = made(stripe_sandbox, "k-1"), made(stripe_sandbox, "k-1", colour="red")
    made(stripe_sandbox, "k-2")
    query = "metadata['ledger_key']:'k-1'"

    first = raw_search(stripe_sandbox, query=query, limit="1")
    rest = raw_search(stripe_sandbox, query=query, page=first.json()["next_page"])
    counted = raw_search(stripe_sandbox, query=query, **{"expand[]": "total_count"})
    both = sdk(stripe_sandbox).v1.payment_intents.search(
        params={"query": f'{query} AND metadata["colour"]:"red"'}
    )

    page = first.json()
    assert set(page) == {"object", "data", "has_more", "next_page", "url"}
    assert (page["object"], page["url"], page["has_more"]) == ("search_result", SEARCH, True)
    assert [i["id"] for i in page["data"]] == [newer]
    assert [i["id"] for i in rest.json()["data"]] == [older]
    assert (rest.json()["has_more"], rest.json()["next_page"]) == (False, None)
    assert counted.json()["total_count"] == 2 and len(counted.json()["data"]) == 2
    assert isinstance(both, stripe.SearchResultObject)
    assert [i.id for i in both.data] == [newer] and isinstance(both.data[0], stripe.PaymentIntent)


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"query": "status:'succeeded'"}, "query"),
        ({"query": "metadata['a']:'1' OR metadata['b']:'2'"}, "query"),
        ({}, "query"),
        ({"query": "metadata['a']:'1'", "page": "not-a-cursor"}, "page"),
        ({"query": "metadata['a']:'1'", "limit": "101"}, "limit"),
        ({"query": "metadata['a']:'1'", "colour": "red"}, "colour"),
    ],
)
def test_a_search_the_face_cannot_read_is_stripes_400_naming_the_parameter(
    stripe_sandbox, params, param
):
    answer = raw_search(stripe_sandbox, **params)

    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert answer.json()["error"]["param"] == param


def test_search_lags_what_was_just_created_while_the_list_has_it(stripe_sandbox):
    intent = made(stripe_sandbox, "k-lag")
    query = {"query": "metadata['ledger_key']:'k-lag'"}
    stripe_settings(stripe_sandbox, search_lag=60)

    lagging = sdk(stripe_sandbox).v1.payment_intents.search(params=query)
    listed = sdk(stripe_sandbox).v1.payment_intents.list()
    stripe_settings(stripe_sandbox, search_lag=0)
    caught_up = sdk(stripe_sandbox).v1.payment_intents.search(params=query)

    assert lagging.data == [] and [i.id for i in listed.data] == [intent]
    assert [i.id for i in caught_up.data] == [intent]


# --- lookups: search first, the listing when search settles nothing ------------------------------


def test_a_payment_search_finds_is_read_again_by_id_and_never_listed(
    stripe_sandbox, make_payment, tmp_path
):
    effect = make_payment()
    sent = pay(stripe_sandbox, effect)

    answer = looked_up(stripe_sandbox, tmp_path, effect)

    assert (answer.outcome, answer.status, answer.provider_ref) == (
        "found",
        "confirmed",
        sent["provider_ref"],
    )
    assert answer.mismatches == () and not answer.listed and "search" in answer.detail
    assert served(stripe_sandbox) == {"payment_intent.search": 1, "payment_intent.retrieve": 1}


def test_two_payments_search_names_under_one_key_are_a_duplicate(
    stripe_sandbox, make_payment, tmp_path
):
    effect = make_payment()
    first = pay(stripe_sandbox, effect, "ignore_keys")["provider_ref"]
    second = pay(stripe_sandbox, effect, "ignore_keys")["provider_ref"]

    answer = looked_up(stripe_sandbox, tmp_path, effect)

    assert answer.outcome == "duplicate" and set(answer.refs) == {first, second}
    assert "payment_intent.list" not in served(stripe_sandbox)


def test_a_payment_search_does_not_show_yet_is_found_by_the_listing(
    stripe_sandbox, make_payment, tmp_path
):
    effect = make_payment()
    sent = pay(stripe_sandbox, effect)
    stripe_settings(stripe_sandbox, search_lag=600)

    answer = looked_up(stripe_sandbox, tmp_path, effect)

    assert (answer.outcome, answer.provider_ref, answer.listed) == (
        "found",
        sent["provider_ref"],
        True,
    )
    assert served(stripe_sandbox) == {"payment_intent.search": 1, "payment_intent.list": 1}


def test_absence_is_proven_by_the_listing_never_by_search(stripe_sandbox, make_payment, tmp_path):
    effect = make_payment()
    pay(stripe_sandbox, make_payment())  # someone else's payment, which search lags on too
    stripe_settings(stripe_sandbox, search_lag=600)

    answer = looked_up(stripe_sandbox, tmp_path, effect)

    assert (answer.outcome, answer.listed) == ("not_found", True)
    assert served(stripe_sandbox)["payment_intent.list"] == 1


@pytest.mark.parametrize("knobs", [{"search_rate_limit": 1}, {"truncate": 1}], ids=["429", "cut"])
def test_a_search_that_fails_leaves_the_lookup_to_the_listing(
    stripe_sandbox, make_payment, tmp_path, knobs
):
    effect = make_payment()
    sent = pay(stripe_sandbox, effect)
    tool = declare(tmp_path, stripe_sandbox.url)
    stripe_settings(stripe_sandbox, **knobs)  # the next request only: the search

    answer = adapter_for(tool).lookup(effect)

    assert (answer.outcome, answer.provider_ref, answer.listed) == (
        "found",
        sent["provider_ref"],
        True,
    )
    assert served(stripe_sandbox) == {"payment_intent.search": 1, "payment_intent.list": 1}


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"object": "list", "data": [], "has_more": False}, "not a search result"),
        ({"object": "search_result", "data": None, "has_more": False}, "no data"),
        ({"object": "search_result", "data": [], "has_more": True}, "more than 10"),
        ({"object": "search_result", "data": [{"id": 5}], "has_more": False}, "cannot read"),
        ({"object": "search_result", "data": [], "has_more": False}, "may not be indexed yet"),
    ],
)
def test_a_search_result_of_another_shape_settles_nothing(body, said):
    named = search._named(body, "el_key")

    assert isinstance(named, Failure) and said in named.detail


def test_what_search_names_under_another_effects_id_is_left_to_the_listing(
    stripe_sandbox, make_payment, tmp_path
):
    effect = make_payment()
    labels = {"idempotency_key": effect.idempotency_key, "id": "another-effect"}
    caller.send(stripe_sandbox.url, labels, CHARGE, "")

    answer = looked_up(stripe_sandbox, tmp_path, effect)

    assert answer.outcome == "inconclusive" and "another effect" in answer.detail
    assert served(stripe_sandbox)["payment_intent.list"] == 1


def test_what_search_showed_is_never_called_absent_by_a_listing_that_missed_it(
    stripe_sandbox, make_payment, tmp_path
):
    """An intent under our key and another effect's id, made long after the effect's dispatch
    ended: the listing's range does not hold it, but search showed it, so nothing is proven."""
    now = timezone.now()
    effect = make_payment(
        created_at=now - timedelta(hours=3), left_dispatch_at=now - timedelta(hours=2)
    )
    labels = {"idempotency_key": effect.idempotency_key, "id": "another-effect"}
    caller.send(stripe_sandbox.url, labels, CHARGE, "")

    answer = looked_up(stripe_sandbox, tmp_path, effect)
    unsearched = looked_up(stripe_sandbox, tmp_path, effect, search=False)

    assert answer.outcome == "inconclusive" and "outside the range" in answer.detail
    # The listing alone sees only the range: what lands later than the ledger reckons a request
    # can is left to the tail check, which lists up to now.
    assert (unsearched.outcome, unsearched.listed) == ("not_found", True)


def test_with_search_off_a_lookup_lists_only(stripe_sandbox, make_payment, tmp_path):
    effect = make_payment()
    sent = pay(stripe_sandbox, effect)

    answer = looked_up(stripe_sandbox, tmp_path, effect, search=False)

    assert (answer.outcome, answer.provider_ref, answer.listed) == (
        "found",
        sent["provider_ref"],
        True,
    )
    assert served(stripe_sandbox) == {"payment_intent.list": 1}


def test_a_tail_check_lists_and_never_searches(stripe_sandbox, make_payment, tmp_path):
    """A resolved effect is looked up again for a second record, which the index may not show."""
    effect = make_payment("confirmed", resolved_at=timezone.now())
    sent = pay(stripe_sandbox, effect)

    answer = looked_up(stripe_sandbox, tmp_path, effect)

    assert (answer.outcome, answer.provider_ref, answer.listed) == (
        "found",
        sent["provider_ref"],
        True,
    )
    assert served(stripe_sandbox) == {"payment_intent.list": 1}


def test_loadtools_refuses_a_search_that_is_not_true_or_false(stripe_sandbox, tmp_path):
    off = declare(tmp_path, stripe_sandbox.url, config={"search": False})

    assert off.lookup_proves_absence  # the listing alone proves absence, with search or not
    with pytest.raises(ToolFileError, match=r"reconciler_config: search must be true or false"):
        declare(tmp_path, stripe_sandbox.url, "refused_tool", config={"search": "yes"})


# --- the listing's range ------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["unknown", "dispatching"])
def test_a_lookup_hours_after_the_dispatch_reads_only_what_was_created_around_it(
    stripe_sandbox, make_payment, tmp_path, status
):
    """Its dispatch ended two hours ago (its report; or its lease, where the last heartbeat
    left it): the five payments made since are not read, one page of two is the whole range.
    A tail check of the same effect reads up to now, and is cut short."""
    now = timezone.now()
    ended = now - timedelta(hours=2)
    fields = {"left_dispatch_at": ended} if status == "unknown" else {"lease_expires_at": ended}
    effect = make_payment(status, created_at=now - timedelta(hours=3), **fields)
    for _ in range(5):
        pay(stripe_sandbox, make_payment())
    paged = {"search": False, "page_size": 2, "max_pages": 1}

    answer = looked_up(stripe_sandbox, tmp_path, effect, **paged)
    effect.status, effect.resolved_at = "confirmed", now
    tail = looked_up(stripe_sandbox, tmp_path, effect, **paged)

    assert (answer.outcome, answer.listed) == ("not_found", True)
    assert tail.outcome == "inconclusive" and "more than 1 pages" in tail.detail
    assert served(stripe_sandbox)["payment_intent.list"] == 2


def test_the_range_ends_settle_after_past_the_dispatch_and_no_later(
    stripe_sandbox, make_payment, tmp_path
):
    """A request still on its way when the dispatch ended lands within the tool's settle_after
    (3 s): it is read. A record made later than that (here with no clock skew allowed) is
    outside what the effect's dispatch could have made, and is not."""
    now = timezone.now()
    in_flight = make_payment(left_dispatch_at=now - timedelta(seconds=1))
    long_done = make_payment(left_dispatch_at=now - timedelta(seconds=10))
    sent = pay(stripe_sandbox, in_flight)
    pay(stripe_sandbox, long_done)
    exact = {"search": False, "clock_skew": 0}

    landed = looked_up(stripe_sandbox, tmp_path, in_flight, **exact)
    outside = looked_up(stripe_sandbox, tmp_path, long_done, **exact)

    assert (landed.outcome, landed.provider_ref) == ("found", sent["provider_ref"])
    assert (outside.outcome, outside.listed) == ("not_found", True)


def test_an_effect_a_restore_put_in_doubt_is_read_as_far_as_the_lost_branch_reaches(
    stripe_sandbox, make_payment, tmp_path
):
    """Its last dispatch here ended two hours ago, but the branch the database lost may have
    sent it again since (`ledger.rules.reach`): what that branch could have made is read."""
    now = timezone.now()
    effect = make_payment(
        created_at=now - timedelta(hours=3), left_dispatch_at=now - timedelta(hours=2)
    )
    RestoreWindow.objects.create(
        lost_since=now - timedelta(hours=1),
        started_at=now - timedelta(minutes=10),
        source="manual",
        started_by="shell:test",
        reason="restored from a backup",
        fork_seq=0,
    )
    record_event(
        effect.id,
        kind="transition",
        actor="system:restore",
        from_status="dispatching",
        to_status="unknown",
        reason="restored_gap",
    )
    sent = pay(stripe_sandbox, effect)  # as the lost branch sent it

    answer = looked_up(stripe_sandbox, tmp_path, effect, search=False)

    assert (answer.outcome, answer.provider_ref) == ("found", sent["provider_ref"])
