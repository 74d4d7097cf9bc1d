"""The overview: where the ledger stands, refreshed in place every few seconds.

Its counts (effects by status and tool, open review items by age) come from the summary that
/metrics reads too (`ledger.overview.summary`), re-read every LEDGER_METRICS_REFRESH
seconds by a thread of the process while someone looks: a poll never counts a million
effects. What it names (the oldest unresolved effect and the recent activity) is read live,
each through an index that finds the few rows shown (`reviews.records.overview`); the blocked
branches come with the summary.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.models import Mode
from ledger.models.states import Kind, Status
from ledger.overview.summary import REVIEW_AGE_HOURS, Summary
from reviews.access.checks import reader
from reviews.access.counts import summary_for
from reviews.records import incidents
from reviews.records.overview import oldest_unresolved, recent_activity

# Labels of the summary's age buckets of open review items (REVIEW_AGE_HOURS).
AGE_LABELS = ["< 1 h", "1–6 h", "6–24 h", "1–3 d", "3–7 d", "> 7 d"]
REFRESH_SECONDS = 5
ACTIVITY_SHOWN = 15


def _counts(
    counted: Summary, mode: str | None
) -> tuple[list[tuple[str, int]], list[tuple[str, list[int], int]]]:
    """Effects by status and by tool (actions and compensations), in `mode` or every mode."""
    by_status = dict.fromkeys(Status.values, 0)
    by_tool: dict[str, dict[str, int]] = {}
    for (agent_mode, kind, tool, status), n in counted.effect_counts.items():
        if kind == Kind.DECISION or (mode is not None and agent_mode != mode):
            continue
        by_status[status] += n
        tool_counts = by_tool.setdefault(tool, {})
        tool_counts[status] = tool_counts.get(status, 0) + n
    tools = [
        (tool, [counts.get(s, 0) for s in Status.values], sum(counts.values()))
        for tool, counts in sorted(by_tool.items())
    ]
    return list(by_status.items()), tools


def _review_ages(counted: Summary, mode: str | None) -> list[tuple[str, int]]:
    """Open review items per age bucket, in `mode` or every mode."""
    totals = [0] * len(REVIEW_AGE_HOURS)
    for agent_mode, counts in counted.review_ages.items():
        if mode is None or agent_mode == mode:
            totals = [a + b for a, b in zip(totals, counts, strict=True)]
    return list(zip(AGE_LABELS, totals, strict=True))


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
    counted = summary_for(request.user)  # the shared summary, or the person's teams' counts
    by_status, by_tool = _counts(counted, mode)
    ages = _review_ages(counted, mode)
    context = {
        "by_status": by_status,
        "by_tool": by_tool,
        "statuses": Status.values,
        "ages": ages,
        "open_reviews": sum(n for _, n in ages),
        # Open incidents (statement lines no effect intended), read live over incident_open_idx:
        # there are few, and each may be an unauthorized charge. Not by mode: a line has none.
        "open_incidents": incidents.open_count(request.user),
        "chart": _chart(ages),
        "oldest": oldest_unresolved(request.user, mode),
        "blocked": counted.blocked,
        "blocked_total": counted.blocked_total,
        # Lookups and the machines' own moves, newest first (event_recovery_idx).
        "activity": recent_activity(request.user, mode, ACTIVITY_SHOWN),
        "counted_at": counted.taken_at,
        "refresh": REFRESH_SECONDS,
        "mode": mode or "",
        "modes": Mode.values,
    }
    template = "reviews/overview.html#panels" if request.htmx else "reviews/overview.html"
    return render(request, template, context)
