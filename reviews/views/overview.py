"""The overview: where the ledger stands, refreshed in place every few seconds."""

from __future__ import annotations

from django.db import connection
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.interlocks import blocked_branches
from ledger.models import Effect, EffectEvent, EventKind, ReviewItem
from ledger.states import INCOMPLETE, Kind, Status
from reviews.access import reader

# Open review items by age: (label, lower bound in hours, upper bound in hours).
AGE_BUCKETS = [
    ("< 1 h", 0, 1),
    ("1–6 h", 1, 6),
    ("6–24 h", 6, 24),
    ("1–3 d", 24, 72),
    ("3–7 d", 72, 168),
    ("> 7 d", 168, None),
]
REFRESH_SECONDS = 5
_BLOCKED_LIMIT = 20


def _counts() -> tuple[list[tuple[str, int]], list[tuple[str, list[int], int]]]:
    """Effects by status and by tool (actions and compensations), from one GROUP BY."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT tool, status, count(*) FROM {Effect._meta.db_table} "
            f"WHERE kind <> '{Kind.DECISION.value}' GROUP BY tool, status"
        )
        rows = cursor.fetchall()
    by_status = dict.fromkeys(Status.values, 0)
    by_tool: dict[str, dict[str, int]] = {}
    for tool, status, n in rows:
        by_status[status] += n
        by_tool.setdefault(tool, {})[status] = n
    tools = [
        (tool, [counts.get(s, 0) for s in Status.values], sum(counts.values()))
        for tool, counts in sorted(by_tool.items())
    ]
    return list(by_status.items()), tools


def _review_ages() -> list[tuple[str, int]]:
    """Open review items per age bucket, in one pass over the open-items index."""
    columns = ", ".join(
        f"count(*) FILTER (WHERE opened_at <= now() - interval '{low} hours'"
        + (f" AND opened_at > now() - interval '{high} hours')" if high else ")")
        for _, low, high in AGE_BUCKETS
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {ReviewItem._meta.db_table} WHERE resolved_at IS NULL"
        )
        counts = cursor.fetchone()
    return [(label, n) for (label, _, _), n in zip(AGE_BUCKETS, counts, strict=True)]


def _chart(ages: list[tuple[str, int]]) -> dict:
    """Geometry of the inline SVG bar chart (no script, so the CSP stays strict)."""
    width, height, gap, top, bottom = 480, 180, 12, 20, 28
    peak = max((n for _, n in ages), default=0) or 1
    bar = (width - gap * (len(ages) + 1)) / len(ages)
    bars = []
    for i, (label, n) in enumerate(ages):
        h = (height - top - bottom) * n / peak
        x = gap + i * (bar + gap)
        bars.append(
            {
                "label": label,
                "n": n,
                "x": round(x, 1),
                "y": round(height - bottom - h, 1),
                "w": round(bar, 1),
                "h": round(h, 1),
                "cx": round(x + bar / 2, 1),
                "late": i == len(ages) - 1,
            }
        )
    return {"width": width, "height": height, "bars": bars, "base": height - bottom}


@require_GET
@reader
def overview(request: HttpRequest) -> HttpResponse:
    by_status, by_tool = _counts()
    ages = _review_ages()
    blocked_total, blocked = blocked_branches(_BLOCKED_LIMIT)
    context = {
        "by_status": by_status,
        "by_tool": by_tool,
        "statuses": Status.values,
        "ages": ages,
        "open_reviews": sum(n for _, n in ages),
        "chart": _chart(ages),
        "oldest": Effect.objects.filter(status__in=sorted(INCOMPLETE))
        .select_related("agent")
        .order_by("created_at")
        .first(),
        "blocked": blocked,
        "blocked_total": blocked_total,
        # Lookups and the machines' own moves, newest first (event_recovery_idx).
        "activity": EffectEvent.objects.filter(
            Q(kind=EventKind.RECONCILIATION) | Q(actor__startswith="system:")
        ).order_by("-id")[:15],
        "refresh": REFRESH_SECONDS,
    }
    template = "reviews/overview.html#panels" if request.htmx else "reviews/overview.html"
    return render(request, template, context)
