"""The effect page's live check: 204 while nothing the page shows changed, otherwise a banner
saying what changed and who changed it; cheap enough to poll every 3 s."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import Effect, Reason, ReviewItem
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from reviews.queue.holds import hold_item, release_item
from reviews.queue.notes import add_note
from tests.factories import signed_in


@pytest.fixture
def unknown(make_effect) -> Effect:
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    return effect


def polled(page: str) -> tuple[str, dict[str, str]]:
    """The live check's URL and parameters as the effect page renders them."""
    url = re.search(r'hx-get="([^"]+/live)"', page).group(1)
    version, item = re.search(r'"version": "(\d+)", "item": "([\d.]+)"', page).groups()
    return url, {"version": version, "item": item}


def page_of(user, effect: Effect) -> str:
    return signed_in(user).get(f"/effects/{effect.id}/").content.decode()


def test_the_page_says_it_is_live_and_polls_every_3_seconds(olga, unknown):
    page = page_of(olga, unknown)

    assert "checks for changes every 3 s" in page
    assert 'hx-trigger="every 3s, live-check"' in page
    assert 'role="status" aria-live="polite"' in page
    assert '<script src="/static/live.js" defer></script>' in page


def test_nothing_changed_is_204(olga, unknown):
    url, state = polled(page_of(olga, unknown))
    response = signed_in(olga).get(url, state)
    assert response.status_code == 204 and response.content == b""


def test_a_reader_may_poll_too(olga, audrey, unknown):
    url, state = polled(page_of(audrey, unknown))
    assert signed_in(audrey).get(url, state).status_code == 204


def test_another_operator_s_decision_shows_a_banner_naming_them(olga, otto, unknown):
    url, state = polled(page_of(olga, unknown))
    decide(
        unknown.id,
        Ask("confirm", "paid", unknown.version, provider_ref="ch_1", evidence="x"),
        user=otto,
    )

    response = signed_in(olga).get(url, state)

    assert response.status_code == 200
    html = response.content.decode()
    assert re.search(
        r"<strong>otto</strong> decided confirm at <time [^>]+>[^<]+</time>; now confirmed", html
    )
    assert f'href="/effects/{unknown.id}/" id="live-reload">Show the latest</a>' in html
    version = Effect.objects.get(pk=unknown.id).version
    assert f'data-version="{version}" data-item="0.0.0"' in html  # the state to poll from next
    assert signed_in(olga).get(url, {"version": version, "item": "0.0.0"}).status_code == 204


def test_a_note_by_someone_else_shows_a_banner(olga, otto, unknown):
    url, state = polled(page_of(olga, unknown))
    add_note(ReviewItem.objects.get(effect=unknown), otto, "I am on the phone with them")

    response = signed_in(olga).get(url, state)

    assert response.status_code == 200
    assert "<strong>otto</strong> added a note at <time" in response.content.decode()


def test_a_hold_and_its_release_each_show_a_banner(olga, otto, unknown):
    item = ReviewItem.objects.get(effect=unknown)
    url, state = polled(page_of(olga, unknown))
    hold_item(item, otto)

    held = signed_in(olga).get(url, state)
    assert held.status_code == 200
    assert "<strong>otto</strong> took this over at <time" in held.content.decode()

    url, state = polled(page_of(olga, unknown))
    release_item(item, otto)
    released = signed_in(olga).get(url, state)
    assert released.status_code == 200 and "The hold was released" in released.content.decode()


def test_the_operator_s_own_change_is_told_as_theirs(olga, unknown):
    url, state = polled(page_of(olga, unknown))
    hold_item(ReviewItem.objects.get(effect=unknown), olga)
    assert "<strong>you</strong> took this over" in signed_in(olga).get(url, state).content.decode()


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"version": "x", "item": "0.0.0"},
        {"version": "1", "item": "1.2"},
        {"version": "1", "item": "a.b.c"},
    ],
)
def test_a_check_without_a_readable_state_is_400(olga, unknown, params):
    response = signed_in(olga).get(f"/effects/{unknown.id}/live", params)
    assert response.status_code == 400


def test_a_check_on_an_unknown_effect_is_404(olga):
    url = "/effects/00000000-0000-0000-0000-000000000000/live"
    assert signed_in(olga).get(url, {"version": "1", "item": "0.0.0"}).status_code == 404


def test_people_without_a_role_cannot_poll(nemo, unknown):
    response = signed_in(nemo).get(f"/effects/{unknown.id}/live", {"version": "1", "item": "0.0.0"})
    assert response.status_code == 403


def test_an_unchanged_check_costs_one_query_after_the_session(olga, unknown):
    client = signed_in(olga)
    url, state = polled(page_of(olga, unknown))
    client.get(url, state)  # warm: the session and the user
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, state).status_code == 204
    ours = [q["sql"] for q in queries if "ledger_effect" in q["sql"]]
    assert len(ours) == 1, ours
    # The session, the user, the roles (with the person's teams), whether the account is linked
    # to the identity provider (a linked account's local session ends at once), the effect.
    assert len(queries) <= 5, [q["sql"] for q in queries]
