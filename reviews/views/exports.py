"""Auditor exports: the filter page and the streamed downloads (`ledger.audit.exports`)."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from ledger.audit import exports as ledger_exports
from ledger.policy.teams import scope_of
from reviews.access.checks import reader
from reviews.access.teams import scoped

DATASET_LABELS = {"effects": "Effects", "events": "Events", "decisions": "Decisions"}
FORMAT_LABELS = {"csv": "CSV", "jsonl": "JSON Lines"}


def _page(request: HttpRequest, filters: ledger_exports.ExportFilter, status: int) -> HttpResponse:
    context = {
        "form": filters.form,
        "datasets": [(name, DATASET_LABELS[name]) for name in ledger_exports.DATASETS],
        "formats": [(name, FORMAT_LABELS[name]) for name in ledger_exports.FORMATS],
        # A scoped person sees their own exports only: another's filters may name other teams'
        # tools and agents (ADR 0014).
        "recent": ledger_exports.recent(user=request.user if scoped(request.user) else None),
    }
    return render(request, "audit/exports.html", context, status=status)


@require_GET
@reader
def exports(request: HttpRequest) -> HttpResponse:
    # Bound only when a filter was given, so a first visit shows no errors.
    filters = ledger_exports.ExportFilter(
        request.GET or None, dataset="effects", teams=scope_of(request.user)
    )
    return _page(request, filters, 400 if filters.is_bound and not filters.is_valid() else 200)


@require_GET
@reader
@never_cache
def download(request: HttpRequest, dataset: str, fmt: str) -> HttpResponse:
    if dataset not in ledger_exports.DATASETS or fmt not in ledger_exports.FORMATS:
        raise Http404("No such export.")
    # Only the rows of the person's teams' effects (and of no team), ADR 0014.
    filters = ledger_exports.ExportFilter(
        request.GET, dataset=dataset, teams=scope_of(request.user)
    )
    if not filters.is_valid():
        return _page(request, filters, 400)
    export = ledger_exports.begin(request.user, fmt, filters)
    response = StreamingHttpResponse(
        ledger_exports.stream(export, filters), content_type=ledger_exports.CONTENT_TYPES[fmt]
    )
    response["Content-Disposition"] = f'attachment; filename="{ledger_exports.filename(export)}"'
    return response
