"""The generic lookup against a provider that needs credentials, pages its answers and rate
limits (devstack.providers.search): credentials from named environment variables, every page
followed before anything counts as absence, a 429 taken as "ask later"."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from devstack.providers.search.fake import PASSWORD, TOKEN, USER
from ledger.effects.recovery import database_now
from ledger.models import Effect
from reconcilers.providers import adapter_for
from reconcilers.providers.checks import check_tool
from reconcilers.providers.outcomes import ListingBroken
from reconcilers.reconcile import process_one
from tests.factories import lost

pytestmark = pytest.mark.django_db


@pytest.fixture
def search(start_sandbox):
    return start_sandbox("search")


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("SEARCH_TOKEN", TOKEN)
    monkeypatch.setenv("SEARCH_USER", USER)
    monkeypatch.setenv("SEARCH_PASSWORD", PASSWORD)
    monkeypatch.setenv("WRONG_TOKEN", "not-the-token")


def seed(search, reference: str, n: int = 1) -> list[dict[str, Any]]:
    made = []
    for _ in range(n):
        reply = search.http.post(
            "/records",
            json={"reference": reference, "state": "open"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert reply.status_code == 201, reply.text
        made.append(reply.json())
    return made


def configure(tool, search, **config: Any) -> None:
    """The tool's lookup pointed at the fake, in pages of two, paged as the fake is told."""
    paged = f"&paging={config['paging']}" if config.get("paging") else ""
    tool.reconciler = "http_lookup"
    tool.reconciler_config = {
        "url": f"{search.url}/search?reference={{idempotency_key}}&per_page=2{paged}",
        "records": "data",
        "key": "reference",
        "status": "state",
        "confirmed": ["open"],
        **config,
    }
    tool.save()


AUTH = [
    {"auth": "bearer", "token_env": "SEARCH_TOKEN"},
    {"auth": "basic", "username_env": "SEARCH_USER", "password_env": "SEARCH_PASSWORD"},
    {"auth": "header", "header": "X-Api-Key", "token_env": "SEARCH_TOKEN"},
    {"auth": "bearer", "token_env": {"live": "SEARCH_TOKEN", "test": "WRONG_TOKEN"}},
]


@pytest.mark.parametrize("auth", AUTH, ids=["bearer", "basic", "header", "by-mode"])
def test_each_credential_scheme_finds_the_record(search, secrets, tools, make_effect, auth):
    effect = make_effect("unknown")
    [record] = seed(search, effect.idempotency_key)
    configure(tools["charge_card"], search, **auth)

    answer = adapter_for(tools["charge_card"]).lookup(effect)

    assert (answer.outcome, answer.provider_ref, answer.status) == (
        "found",
        record["id"],
        "confirmed",
    )


def test_a_test_tool_uses_the_test_secret_and_wrong_credentials_prove_nothing(
    search, secrets, tools, make_effect
):
    effect = make_effect("unknown")
    seed(search, effect.idempotency_key)
    tool = tools["charge_card"]
    configure(
        tool, search, auth="bearer", token_env={"live": "SEARCH_TOKEN", "test": "WRONG_TOKEN"}
    )
    tool.mode = "test"

    answer = adapter_for(tool).lookup(effect)

    assert (answer.outcome, answer.detail) == ("inconclusive", "provider answered 401")


@pytest.mark.parametrize("paging", ["next", "cursor", "link"])
def test_every_page_is_read_before_a_count_or_an_absence_is_taken(
    search, secrets, tools, make_effect, paging
):
    duplicated, missing = make_effect("unknown"), make_effect("unknown")
    seed(search, duplicated.idempotency_key, n=5)  # three pages of two
    extra = {"next": "links.next"} if paging == "next" else {}
    extra |= {"cursor": "meta.next_cursor"} if paging == "cursor" else {}
    configure(tools["charge_card"], search, auth="bearer", token_env="SEARCH_TOKEN", paging=paging)
    tools["charge_card"].reconciler_config |= extra
    tools["charge_card"].save()
    adapter = adapter_for(tools["charge_card"])

    twice = adapter.lookup(duplicated)
    nothing = adapter.lookup(missing)

    assert (twice.outcome, len(twice.refs)) == ("duplicate", 5)
    assert (nothing.outcome, nothing.listed) == ("not_found", True)


def test_a_429_is_ask_later_with_the_providers_retry_after(search, secrets, tools, make_effect):
    effect = make_effect("unknown")
    configure(tools["charge_card"], search, auth="bearer", token_env="SEARCH_TOKEN")
    search.http.post("/_sandbox/throttle", json={"requests": 1, "retry_after": 120})

    limited = adapter_for(tools["charge_card"]).lookup(effect)
    then = adapter_for(tools["charge_card"]).lookup(effect)

    assert (limited.outcome, limited.retry_after) == ("inconclusive", 120.0)
    assert "429" in limited.detail
    assert then.outcome == "not_found"


def test_a_429_moves_the_next_check_past_its_retry_after(search, secrets, tools, alice):
    configure(tools["charge_card"], search, auth="bearer", token_env="SEARCH_TOKEN")
    effect = lost(alice)
    search.http.post("/_sandbox/throttle", json={"requests": 5, "retry_after": 600})

    assert process_one(effect["id"])

    stored = Effect.objects.get(pk=effect["id"])
    assert stored.status == "unknown"
    assert stored.next_check_at >= database_now() + timedelta(seconds=590)


def test_a_window_listing_follows_link_headers_to_the_last_page(search, secrets, tools):
    start = timezone.now() - timedelta(seconds=1)
    made = seed(search, "ref-a", n=3) + seed(search, "ref-b", n=2)
    configure(
        tools["charge_card"],
        search,
        auth="header",
        header="X-Api-Key",
        token_env="SEARCH_TOKEN",
        paging="link",
        window_url=f"{search.url}/window?start={{start}}&end={{end}}&per_page=2&paging=link",
        created="created_at",
    )

    listing = adapter_for(tools["charge_card"]).list_window(start, timezone.now())
    records = list(listing.records)  # streamed: the pages are fetched as it is read

    assert listing.complete, listing.detail
    assert sorted(r.provider_ref for r in records) == sorted(m["id"] for m in made)


def test_a_page_lost_on_the_way_leaves_the_window_incomplete(search, secrets, tools):
    configure(
        tools["charge_card"],
        search,
        auth="bearer",
        token_env="SEARCH_TOKEN",
        paging="next",
        next="links.next",
        window_url=f"{search.url}/window?start={{start}}&end={{end}}&per_page=1&paging=next",
        created="created_at",
    )
    start = timezone.now() - timedelta(seconds=1)
    seed(search, "ref-a", n=2)
    search.http.post("/_sandbox/faults", json={"garbage": True, "methods": ["GET"]})

    listing = adapter_for(tools["charge_card"]).list_window(start, timezone.now())

    assert listing.complete  # complete unless reading it breaks off, as it does
    with pytest.raises(ListingBroken, match="not JSON"):
        list(listing.records)


def window(tool, search, per_page: int, **config: Any) -> None:
    """The tool's window listing pointed at the fake, in pages of `per_page`."""
    configure(
        tool,
        search,
        auth="bearer",
        token_env="SEARCH_TOKEN",
        paging="cursor",
        cursor="meta.next_cursor",
        window_url=(
            f"{search.url}/window?start={{start}}&end={{end}}&per_page={per_page}&paging=cursor"
        ),
        created="created_at",
        **config,
    )


def test_a_windows_pages_are_fetched_as_the_records_before_them_are_read(search, secrets, tools):
    """The listing holds one page at a time: the first page is read before the provider asks
    to be asked later, and that shows only when the next page is wanted."""
    window(tools["charge_card"], search, per_page=2)
    start = timezone.now() - timedelta(seconds=1)
    made = seed(search, "ref-a", n=5)

    listing = adapter_for(tools["charge_card"]).list_window(start, timezone.now())
    records = iter(listing.records)
    first_page = [next(records).provider_ref, next(records).provider_ref]
    search.http.post("/_sandbox/throttle", json={"requests": 1, "retry_after": 30})

    assert listing.complete and first_page == [m["id"] for m in made[:2]]
    with pytest.raises(ListingBroken, match="429"):
        next(records)


def test_a_window_longer_than_its_page_bound_is_not_complete(search, secrets, tools):
    window(tools["charge_card"], search, per_page=1, window_max_pages=2)
    start = timezone.now() - timedelta(seconds=1)
    made = seed(search, "ref-a", n=3)

    listing = adapter_for(tools["charge_card"]).list_window(start, timezone.now())
    records = iter(listing.records)
    first_pages = [next(records).provider_ref, next(records).provider_ref]

    assert listing.complete and first_pages == [m["id"] for m in made[:2]]
    with pytest.raises(ListingBroken, match="more than 2 pages"):
        next(records)


def test_a_window_is_not_asked_for_without_its_credential(search, tools, monkeypatch):
    window(tools["charge_card"], search, per_page=2)
    monkeypatch.delenv("SEARCH_TOKEN", raising=False)

    listing = adapter_for(tools["charge_card"]).list_window(timezone.now(), timezone.now())

    assert not listing.complete and "token_env" in listing.detail


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"auth": "bearer", "token": "abc"}, "reconciler_config.token: a secret is never written"),
        ({"auth": "bearer"}, 'auth = "bearer" needs token_env'),
        ({"auth": "basic", "username_env": "U"}, 'auth = "basic" needs password_env'),
        ({"auth": "header", "token_env": "T", "header": "Bad Header"}, "needs header"),
        ({"auth": "oauth"}, "auth must be one of"),
        ({"paging": "cursor"}, 'paging = "cursor" needs cursor'),
        ({"url": "http://x.invalid/search"}, "url must be a template with {idempotency_key}"),
        ({"window_max_pages": 0}, "window_max_pages must be a whole number from 1 to 100000"),
    ],
)
def test_loadtools_refuses_what_the_lookup_could_not_use(config, problem):
    fields = {
        "reconciler": "http_lookup",
        "reconciler_config": {"url": "http://x.invalid/?r={idempotency_key}", **config},
    }

    assert problem in check_tool("t", fields)


def test_a_provider_that_does_not_answer_is_inconclusive_not_absent(tools, make_effect):
    effect = make_effect("unknown")
    tool = tools["charge_card"]
    tool.reconciler, tool.reconciler_config = (
        "http_lookup",
        {"url": "http://127.0.0.1:9/search?reference={idempotency_key}"},
    )

    answer = adapter_for(tool).lookup(effect)

    assert (answer.outcome, answer.detail) == ("inconclusive", "provider unreachable: ConnectError")
