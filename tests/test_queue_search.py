"""The review queue's rows (real age, what is at stake, the suggested decision, a blank assign
picker), its exact-match search, its live refresh and its constant query count."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from ledger.models import Effect, Reason, ReviewItem
from ledger.policy import configversion, tools
from ledger.policy.configversion import VersionedCache
from reviews.queue.pages import age
from tests.factories import in_review, lookup_found, signed_in

HTMX = {"HX-Request": "true"}


def row_of(html: str, effect: Effect) -> str:
    return html.split(f'data-effect="{effect.id}"')[1].split("</tr>")[0]


def live_token(html: str) -> str:
    """The fingerprint the page's live poll sends back."""
    found = re.search(r"live=([0-9a-f]{16})", html)
    assert found, "the results do not poll"
    return found.group(1)


# --- Rows ------------------------------------------------------------------------------------


def test_a_row_shows_the_effects_real_age_not_the_items(olga, make_effect):
    effect = make_effect("unknown", attempt=1)
    Effect.objects.filter(pk=effect.pk).update(created_at=effect.created_at - timedelta(hours=25))
    in_review(effect)  # opened now, for an effect created 25 hours ago
    row = row_of(signed_in(olga).get("/queue/").content.decode(), effect)
    assert '<span class="effect-age"' in row and ">25 h</span>" in row
    assert "0 minutes" not in row


@pytest.mark.parametrize(
    ("minor", "currency", "shown"),
    [(1250, "EUR", "12.50 EUR"), (1250, "JPY", "1250 JPY"), (1250, "BHD", "1.250 BHD")],
)
def test_a_row_shows_what_is_at_stake_in_the_currencys_own_units(
    olga, make_effect, minor, currency, shown
):
    effect = make_effect("unknown", attempt=1, target="acct_977")
    Effect.objects.filter(pk=effect.pk).update(amount_minor=minor, currency=currency)
    in_review(effect)
    row = row_of(signed_in(olga).get("/queue/").content.decode(), effect)
    assert f'<strong class="amount">{shown}</strong>' in row
    assert '<span class="target">acct_977</span>' in row


def test_a_row_links_the_suggested_decision_pre_filled(olga, make_effect):
    effect = make_effect("unknown", attempt=1)
    lookup_found(effect, "ch_found_1")
    item = in_review(effect)
    html = signed_in(olga).get("/queue/").content.decode()
    row = row_of(html, effect)
    assert (
        f'<tr id="item-{item.pk}" class="queue-row" data-effect="{effect.id}" '
        f'data-item="{item.pk}">' in html
    )
    assert f'<a data-open href="/effects/{effect.id}/" aria-keyshortcuts="o">' in row
    assert f'data-suggest="confirm" href="/effects/{effect.id}/?decide=confirm"' in row
    assert "ch_found_1" in row
    assert '<tbody id="rows"' in html and 'href="#rows">Skip to rows</a>' in html


def test_a_row_without_a_suggestion_offers_none(olga, make_effect):
    effect = make_effect("unknown", attempt=3, max_attempts=3)  # no lookup, nothing safe
    in_review(effect, Reason.NO_LOOKUP)
    row = row_of(signed_in(olga).get("/queue/").content.decode(), effect)
    assert "data-suggest" not in row


def test_the_assign_picker_starts_blank(olga, otto, make_effect):
    effect = make_effect("unknown", attempt=1)
    in_review(effect)
    row = row_of(signed_in(olga).get("/queue/").content.decode(), effect)
    picker = row.split('name="assignee"')[1].split("</select>")[0]
    assert picker.split("<option")[1].startswith(' value="">Assign to…</option>')
    assert "selected" not in picker
    assert ">olga</option>" in picker and ">otto</option>" in picker


def test_an_empty_assign_choice_is_refused(olga, make_effect):
    item = in_review(make_effect("unknown", attempt=1))
    response = signed_in(olga).post(f"/queue/{item.pk}/assign", {"assignee": ""}, headers=HTMX)
    assert response.status_code == 400
    item.refresh_from_db()
    assert item.assignee is None


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (59, "0 min"),
        (12 * 60, "12 min"),
        (25 * 3600, "25 h"),
        (71 * 3600, "71 h"),
        (9 * 86400, "9 d"),
    ],
)
def test_age_reads_in_the_unit_an_operator_weighs_it_in(seconds, shown):
    from django.utils import timezone

    now = timezone.now()
    assert age(now - timedelta(seconds=seconds), now) == shown


# --- Search ----------------------------------------------------------------------------------


@pytest.fixture
def two(make_effect) -> tuple[Effect, Effect]:
    """Two effects in review that differ in every field the search matches."""
    wanted = make_effect("unknown", attempt=1, target="acct_wanted", run_id="run-wanted")
    other = make_effect("unknown", attempt=1, target="acct_other", run_id="run-other")
    Effect.objects.filter(pk=wanted.pk).update(provider_ref="ch_wanted")
    Effect.objects.filter(pk=other.pk).update(provider_ref="ch_other")
    in_review(wanted)
    in_review(other)
    wanted.refresh_from_db()
    return wanted, other


@pytest.mark.parametrize("field", ["id", "idempotency_key", "provider_ref", "target", "run_id"])
def test_search_finds_an_item_by_each_exact_field(olga, two, field):
    wanted, _other = two
    text = str(getattr(wanted, field))
    page = signed_in(olga).get("/queue/", {"q": f"  {text} "})
    assert page.status_code == 200
    assert [i.effect_id for i in page.context["page"]] == [wanted.id]


def test_search_is_exact_not_a_substring(olga, two):
    page = signed_in(olga).get("/queue/", {"q": "acct_want"})
    assert page.status_code == 200
    assert list(page.context["page"]) == []
    html = page.content.decode()
    assert "0 items." in html and 'id="unlisted"' not in html


@pytest.mark.parametrize(
    "text",
    ["not-a-uuid", "123e4567-e89b-12d3-a456-42661417400", "'; DROP TABLE x; --", "%", "\u00e9"],
)
def test_search_text_that_is_no_uuid_is_no_error(olga, two, text):
    page = signed_in(olga).get("/queue/", {"q": text})
    assert page.status_code == 200
    assert list(page.context["page"]) == []


def test_an_overlong_search_is_a_400(olga):
    assert signed_in(olga).get("/queue/", {"q": "x" * 501}).status_code == 400


def test_search_follows_the_state_filter_and_links_what_it_leaves_out(olga, two):
    wanted, _other = two
    ReviewItem.objects.filter(effect=wanted).update(resolved_at=wanted.created_at)
    client = signed_in(olga)
    resolved = client.get("/queue/", {"q": "ch_wanted", "state": "resolved"})
    assert [i.effect_id for i in resolved.context["page"]] == [wanted.id]
    opened = client.get("/queue/", {"q": "ch_wanted"})
    assert list(opened.context["page"]) == []
    notice = opened.content.decode().split('id="unlisted"')[1].split("</p>")[0]
    assert "with no open review item" in notice and f'href="/effects/{wanted.id}/"' in notice


def test_search_says_when_an_effect_has_no_review_item(olga, make_effect):
    lone = make_effect("confirmed", target="acct_lonely")
    html = signed_in(olga).get("/queue/", {"q": "acct_lonely", "state": "all"}).content.decode()
    assert "0 items." in html
    notice = html.split('id="unlisted"')[1].split("</p>")[0]
    assert "with no review item" in notice and f'href="/effects/{lone.id}/"' in notice


def test_every_searched_field_has_an_index(db):
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Effect._meta.db_table)
    indexed = {tuple(c["columns"]) for c in constraints.values() if c["index"] or c["primary_key"]}
    for column in ("id", "idempotency_key", "provider_ref", "target", "run_id"):
        assert (column,) in indexed, column


# --- Live ------------------------------------------------------------------------------------


def test_the_live_poll_answers_204_until_someone_else_acts(olga, otto, make_effect):
    item = in_review(make_effect("unknown", attempt=1))
    client = signed_in(olga)
    page = client.get("/queue/")
    seen = page.context["fingerprint"]
    html = page.content.decode()
    assert f"live={seen}" in html and 'hx-trigger="every 4s"' in html and "Live: updated" in html
    assert client.get("/queue/", {"live": seen}, headers=HTMX).status_code == 204
    signed_in(otto).post(f"/queue/{item.pk}/hold", headers=HTMX)
    changed = client.get("/queue/", {"live": seen}, headers=HTMX)
    assert changed.status_code == 200
    fresh = changed.content.decode()
    assert fresh.lstrip().startswith('<section id="results"') and "otto" in fresh
    assert live_token(fresh) != seen


def test_the_live_poll_sees_a_new_item_and_a_decision(olga, make_effect):
    client = signed_in(olga)
    first = in_review(make_effect("unknown", attempt=1))
    seen = live_token(client.get("/queue/").content.decode())
    in_review(make_effect("unknown", attempt=1))
    after_new = client.get("/queue/", {"live": seen}, headers=HTMX)
    assert after_new.status_code == 200
    seen = live_token(after_new.content.decode())
    Effect.objects.filter(pk=first.effect_id).update(version=99)  # any transition bumps it
    assert client.get("/queue/", {"live": seen}, headers=HTMX).status_code == 200


# --- Cost ------------------------------------------------------------------------------------


def test_the_queue_costs_the_same_queries_for_one_row_as_for_fifty(olga, make_effect, monkeypatch):
    client = signed_in(olga)

    def effect_in_review(n: int) -> Effect:
        effect = make_effect("unknown", attempt=1, target=f"acct_{n}")
        Effect.objects.filter(pk=effect.pk).update(amount_minor=100 + n, currency="EUR")
        if n % 2 == 0:  # half of them with a lookup that found them (a suggested confirm)
            lookup_found(effect, f"ch_{n}")
        in_review(effect)
        return effect

    def counted() -> int:
        # Each count starts with the tools' policies unread: they are cached per process (and
        # re-read when the configuration version moves), which is not what this test weighs.
        configversion.expire()
        monkeypatch.setattr(tools, "_cache", VersionedCache())
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/queue/").status_code == 200
        return len(captured)

    effect_in_review(1)
    client.get("/queue/")  # the process's first page reads the ledger's summary (the banners)
    one = counted()
    for n in range(2, 51):
        effect_in_review(n)
    assert len(client.get("/queue/").context["page"]) == 50
    assert counted() == one
