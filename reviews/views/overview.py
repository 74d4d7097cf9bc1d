"""The overview: where the ledger stands, refreshed in place every few seconds."""

from __future__ import annotations

from django.db import connection
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.interlocks import blocked_branches
from ledger.models import Agent, Effect, EffectEvent, EventKind, Mode, ReviewItem
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


def _mode_join(alias: str, mode: str | None) -> tuple[str, list[str]]:
    """A JOIN keeping only effects (alias `alias`) of agents in `mode`; nothing for all modes."""
    if mode is None:
        return "", []
    return f" JOIN {Agent._meta.db_table} a ON a.id = {alias}.agent_id AND a.mode = %s", [mode]


def _counts(mode: str | None) -> tuple[list[tuple[str, int]], list[tuple[str, list[int], int]]]:
    """Effects by status and by tool (actions and compensations), from one GROUP BY."""
    join, params = _mode_join("e", mode)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT e.tool, e.status, count(*) FROM {Effect._meta.db_table} e{join} "
            f"WHERE e.kind <> '{Kind.DECISION.value}' GROUP BY e.tool, e.status",
            params,
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


def _review_ages(mode: str | None) -> list[tuple[str, int]]:
    """Open review items per age bucket, in one pass over the open-items index."""
    columns = ", ".join(
        f"count(*) FILTER (WHERE r.opened_at <= now() - interval '{low} hours'"
        + (f" AND r.opened_at > now() - interval '{high} hours')" if high else ")")
        for _, low, high in AGE_BUCKETS
    )
    join, params = _mode_join("e", mode)
    if join:
        join = f" JOIN {Effect._meta.db_table} e ON e.id = r.effect_id{join}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM {ReviewItem._meta.db_table} r{join} "
            "WHERE r.resolved_at IS NULL",
            params,
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
    # ?mode=test|live: only effects of agents in that mode; anything else shows every mode.
    mode = request.GET.get("mode") if request.GET.get("mode") in Mode.values else None
    mine = Q(agent__mode=mode) if mode else Q()
    by_status, by_tool = _counts(mode)
    ages = _review_ages(mode)
    blocked_total, blocked = blocked_branches(_BLOCKED_LIMIT)
    context = {
        "by_status": by_status,
        "by_tool": by_tool,
        "statuses": Status.values,
        "ages": ages,
        "open_reviews": sum(n for _, n in ages),
        "chart": _chart(ages),
        "oldest": Effect.objects.filter(mine, status__in=sorted(INCOMPLETE))
        .select_related("agent")
        .order_by("created_at")
        .first(),
        "blocked": blocked,
        "blocked_total": blocked_total,
        # Lookups and the machines' own moves, newest first (event_recovery_idx).
        "activity": EffectEvent.objects.filter(
            Q(kind=EventKind.RECONCILIATION) | Q(actor__startswith="system:"),
            Q(effect__agent__mode=mode) if mode else Q(),
        ).order_by("-id")[:15],
        "refresh": REFRESH_SECONDS,
        "mode": mode or "",
        "modes": Mode.values,
    }
    template = "reviews/overview.html#panels" if request.htmx else "reviews/overview.html"
    return render(request, template, context)
