"""The decision service itself checks who decides, as the database has them at that moment, for
every channel: a deactivated account, or one that lost the operator role, is refused
(`NotAnOperator`, 403 `not_an_operator`) whatever its caller read earlier, and nothing is
written."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User

from ledger.models import Effect, ReviewItem
from ledger.policy.roles import ADMIN, grant
from reviews.access.checks import can_act
from reviews.decisions.decide import Ask, NotAnOperator, decide
from tests.factories import in_review


@pytest.fixture
def unknown(make_effect) -> Effect:
    effect = make_effect("unknown", attempt=1)
    in_review(effect)
    return effect


def _fail(effect: Effect, channel: str = "page") -> Ask:
    return Ask("fail", "declined", effect.version, evidence="bank", channel=channel)


def _nothing_written(effect: Effect) -> None:
    effect.refresh_from_db()
    assert effect.status == "unknown"
    assert not Effect.objects.filter(parent=effect, kind="decision").exists()
    assert ReviewItem.objects.get(effect=effect).resolved_at is None


@pytest.mark.parametrize("channel", ["page", "slack", "email", "api", "command"])
def test_a_person_who_lost_the_operator_role_since_it_was_read_is_refused(olga, unknown, channel):
    assert can_act(olga)  # read once, and remembered on the object for the request
    olga.groups.remove(Group.objects.get(name="operator"))

    with pytest.raises(NotAnOperator) as refused:
        decide(unknown.id, _fail(unknown, channel), user=olga)

    assert (refused.value.status, refused.value.code) == (403, "not_an_operator")
    _nothing_written(unknown)


def test_a_deactivated_person_is_refused_though_the_object_says_active(olga, unknown):
    User.objects.filter(pk=olga.pk).update(is_active=False)
    assert olga.is_active

    with pytest.raises(NotAnOperator):
        decide(unknown.id, _fail(unknown), user=olga)
    _nothing_written(unknown)


def test_a_person_without_a_role_is_refused_and_admins_decide(nemo, make_effect):
    first, second, third = (make_effect("unknown", attempt=1) for _ in range(3))
    for effect in (first, second, third):
        in_review(effect)
    with pytest.raises(NotAnOperator):
        decide(first.id, _fail(first), user=nemo)
    _nothing_written(first)

    grant(nemo, ADMIN)  # the admin group (and superuser) decide, as on the page
    assert decide(second.id, _fail(second), user=nemo).target.status == "failed"
    nemo.groups.clear()
    assert User.objects.get(pk=nemo.pk).is_superuser
    assert decide(third.id, _fail(third), user=nemo).target.status == "failed"
