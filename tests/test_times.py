"""One date format on every page: `{% timestamp %}` and `{% ago %}` (reviews.templatetags.times)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.template import Context, Template
from django.utils import timezone

from reviews.templatetags.times import how_long_ago

AT = datetime(2026, 3, 1, 12, 5, 42, tzinfo=UTC)


def render(source: str, **context) -> str:
    return Template("{% load times %}" + source).render(Context(context))


def test_a_timestamp_is_minutes_with_the_exact_instant_in_its_datetime():
    assert render("{% timestamp at %}", at=AT) == (
        '<time datetime="2026-03-01T12:05:42+00:00">2026-03-01 12:05</time>'
    )


def test_a_timestamp_can_say_how_long_ago_too():
    at = timezone.now() - timedelta(days=1, hours=1, minutes=3)
    assert render("{% timestamp at ago=True %}", at=at).endswith(
        '</time> <span class="ago">(1\xa0day, 1\xa0hour ago)</span>'
    )


def test_ago_shows_the_exact_time_on_hover():
    at = timezone.now() - timedelta(minutes=25, seconds=5)
    shown = render("{% ago at %}", at=at)
    assert shown.endswith(">25\xa0minutes ago</time>")
    assert f'title="{timezone.localtime(at):%Y-%m-%d %H:%M}"' in shown


def test_no_time_renders_nothing():
    assert render("[{% timestamp at %}][{% ago at %}]", at=None) == "[][]"


def test_relative_times_in_the_past_the_future_and_just_now():
    now = AT
    assert how_long_ago(now - timedelta(hours=25), now) == "1\xa0day, 1\xa0hour ago"
    assert how_long_ago(now + timedelta(minutes=5), now) == "in 5\xa0minutes"
    assert how_long_ago(now - timedelta(seconds=20), now) == "just now"
