"""Times as the operator pages show them, one format everywhere: `{% timestamp value %}` for
when, `{% ago value %}` for how long ago, `{% timestamp value ago=True %}` for both.

The review queue shows two times in each of its 50 rows, each as a `<time>` element with its
ISO form and a short one. Written as `{{ value|date:'c' }}` and `{{ value|date:"Y-m-d H:i" }}`,
that is four passes through Django's date formatting per row, a quarter of the page's rendering;
this tag formats each time once, in the current time zone, with Python's own formatting.
"""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

register = template.Library()

# The one format: minutes are what an operator compares; the ISO form keeps the seconds.
FORMAT = "%Y-%m-%d %H:%M"


def how_long_ago(value: datetime, now: datetime | None = None) -> str:
    """How long ago, as "3 minutes ago" or "1 day, 2 hours ago": two units at most, so that a
    day-old item never reads as its minutes; "in 5 minutes" for a time still to come (a due
    date); "just now" under a minute either way."""
    now = now or timezone.now()
    if abs((now - value).total_seconds()) < 60:
        return "just now"
    if value > now:
        return f"in {timesince(now, value, depth=2)}"
    return f"{timesince(value, now, depth=2)} ago"


@register.simple_tag
def timestamp(value: datetime | None, ago: bool = False) -> SafeString | str:
    """`<time datetime="ISO 8601">YYYY-MM-DD HH:MM</time>`, followed by "(3 minutes ago)" with
    `ago=True`, or nothing for no time."""
    if value is None:
        return ""
    local = timezone.localtime(value)
    if ago:
        return format_html(
            '<time datetime="{}">{}</time> <span class="ago">({})</span>',
            local.isoformat(),
            local.strftime(FORMAT),
            how_long_ago(value),
        )
    return format_html('<time datetime="{}">{}</time>', local.isoformat(), local.strftime(FORMAT))


@register.simple_tag
def ago(value: datetime | None) -> SafeString | str:
    """`<time datetime="ISO 8601" title="YYYY-MM-DD HH:MM">3 minutes ago</time>`: the relative
    form, the exact time one hover away."""
    if value is None:
        return ""
    local = timezone.localtime(value)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        local.isoformat(),
        local.strftime(FORMAT),
        how_long_ago(value),
    )
