"""An operator's hold on a review item: holding or assigning an item records since when its
holder works on it (the item's `held_at`), the effect page says so, and only the holder or an
admin releases it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from ledger.models import Effect, Reason, ReviewItem
from ledger.policy.roles import ADMIN, grant
from ledger.rules.reviewqueue import open_review
from reviews.decisions.decide import Ask, decide
from reviews.queue.holds import assign_item, hold_item
from tests.factories import signed_in
from tests.helpers import PASSWORD


@pytest.fixture
def item(make_effect) -> ReviewItem:
    effect = make_effect("unknown", attempt=1)
    open_review(effect.id, Reason.INCONCLUSIVE)
    return ReviewItem.objects.get(effect=effect)


@pytest.fixture
def ada(db) -> User:
    user = User.objects.create_user("ada", password=PASSWORD)
    grant(user, ADMIN)
    return user


def db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def release(user: User, item: ReviewItem, *, htmx: bool = True):
    headers = {"HX-Request": "true"} if htmx else {}
    return signed_in(user).post(f"/queue/{item.pk}/release", headers=headers)


def test_holding_records_when_the_hold_started(olga, item):
    assert item.held_at is None
    assert hold_item(item, olga) == olga

    item.refresh_from_db()
    assert item.assignee == olga
    assert item.held_at is not None
    assert abs(item.held_at - db_now()) < timedelta(seconds=5)


def test_a_second_hold_does_not_move_the_first_one_s_time(olga, otto, item):
    hold_item(item, olga)
    ReviewItem.objects.filter(pk=item.pk).update(held_at=timezone.now() - timedelta(hours=1))
    before = ReviewItem.objects.get(pk=item.pk).held_at

    assert hold_item(item, otto) == olga
    assert ReviewItem.objects.get(pk=item.pk).held_at == before


def test_assigning_starts_the_new_holder_s_hold_now(olga, otto, item):
    hold_item(item, olga)
    ReviewItem.objects.filter(pk=item.pk).update(held_at=timezone.now() - timedelta(hours=1))

    assert assign_item(item, otto)
    item.refresh_from_db()
    assert item.assignee == otto
    assert abs(item.held_at - db_now()) < timedelta(seconds=5)


def test_the_effect_page_says_who_works_on_it_since_when(olga, otto, item):
    hold_item(item, otto)
    ReviewItem.objects.filter(pk=item.pk).update(
        held_at=timezone.make_aware(timezone.datetime(2026, 3, 4, 10, 2))
    )

    page = signed_in(olga).get(f"/effects/{item.effect_id}/").content.decode()
    assert "otto is</strong> working on this since <time" in page
    assert "2026-03-04 10:02</time>" in page
    assert 'id="release-hold"' not in page  # olga does not hold it
    mine = signed_in(otto).get(f"/effects/{item.effect_id}/").content.decode()
    assert "You are</strong> working on this" in mine and 'id="release-hold"' in mine


def test_an_item_nobody_holds_offers_a_hold_that_posts_to_the_queue_s_hold(olga, item):
    page = signed_in(olga).get(f"/effects/{item.effect_id}/").content.decode()

    assert "Nobody is working on this." in page
    assert f'action="/queue/{item.pk}/hold"' in page and 'id="hold-item"' in page
    signed_in(olga).post(f"/queue/{item.pk}/hold", headers={"HX-Request": "true"})
    assert ReviewItem.objects.get(pk=item.pk).assignee == olga


def test_the_hold_s_old_address_still_holds_for_one_release(olga, item):
    response = signed_in(olga).post(f"/queue/{item.pk}/claim", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert ReviewItem.objects.get(pk=item.pk).assignee == olga


def test_the_holder_releases_their_hold(olga, item):
    hold_item(item, olga)

    response = release(olga, item)

    assert response.status_code == 200
    item.refresh_from_db()
    assert (item.assignee, item.held_at) == (None, None)
    assert "Nobody is working on this." in response.content.decode()


def test_a_plain_release_goes_back_to_the_effect_page(olga, item):
    hold_item(item, olga)
    response = release(olga, item, htmx=False)
    assert response.status_code == 302 and response["Location"] == f"/effects/{item.effect_id}/"


def test_another_operator_may_not_release_someone_s_hold(olga, otto, item):
    hold_item(item, olga)

    response = release(otto, item)

    assert response.status_code == 409
    assert "olga holds this item" in response.content.decode()
    assert 'role="alert"' in response.content.decode()
    assert ReviewItem.objects.get(pk=item.pk).assignee == olga
    plain = release(otto, item, htmx=False)
    assert plain.status_code == 409


def test_an_admin_may_release_anyone_s_hold(olga, ada, item):
    hold_item(item, olga)
    assert release(ada, item).status_code == 200
    assert ReviewItem.objects.get(pk=item.pk).assignee is None


def test_releasing_an_item_nobody_holds_or_resolved_is_refused(olga, item):
    assert release(olga, item).status_code == 409
    hold_item(item, olga)
    effect = Effect.objects.get(pk=item.effect_id)
    decide(effect.id, Ask("fail", "declined", effect.version, evidence="x"), user=olga)
    response = release(olga, item)
    assert response.status_code == 409
    assert "Nobody holds this item any more." in response.content.decode()


def test_an_auditor_may_not_release_and_sees_no_button(olga, audrey, item):
    hold_item(item, olga)
    assert release(audrey, item).status_code == 403
    page = signed_in(audrey).get(f"/effects/{item.effect_id}/").content.decode()
    assert "olga is</strong> working on this" in page and 'id="release-hold"' not in page
    assert ReviewItem.objects.get(pk=item.pk).assignee == olga


def test_release_needs_a_post_and_an_item_that_exists(olga, item):
    assert signed_in(olga).get(f"/queue/{item.pk}/release").status_code == 405
    assert signed_in(olga).post("/queue/999999/release").status_code == 404
