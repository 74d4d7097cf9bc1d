"""Incidents as the pages show them (what the provider did that no effect asked for,
`ledger.statements`): the open ones a page at a time, gravest first; the ones acknowledged
lately; how many are open; one to acknowledge. Incidents of other teams' tools are not shown
(ADR 0014)."""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator

from ledger.models import Incident
from ledger.policy.iso4217 import major_units
from ledger.statements import incident_queue
from reviews.access.teams import Person, visible_by_tool, visible_object_or_404


def _with_amounts(incidents: list[Incident]) -> list[Incident]:
    for incident in incidents:
        incident.amount = major_units(incident.line.amount_minor, incident.line.currency)
    return incidents


def open_page(user: Person, number: Any, per_page: int) -> Page:
    """Page `number` of the open incidents, in the order people should take them."""
    page = Paginator(visible_by_tool(user, incident_queue()), per_page).get_page(number)
    page.object_list = _with_amounts(list(page.object_list))
    return page


def acknowledged(user: Person, latest: int) -> list[Incident]:
    """The `latest` incidents acknowledged, most recent first, with who acknowledged them."""
    return _with_amounts(
        list(
            visible_by_tool(user, Incident.objects.filter(acknowledged_at__isnull=False))
            .select_related("line", "acknowledged_by")
            .order_by("-acknowledged_at", "-id")[:latest]
        )
    )


def open_count(user: Person) -> int:
    """How many incidents are open: a count over incident_open_idx (there are few, and each may
    be an unauthorized charge)."""
    return visible_by_tool(user, Incident.objects.filter(acknowledged_at__isnull=True)).count()


def incident_or_404(user: Person, incident_id: int) -> Incident:
    """The incident, if it exists and is of a tool the person sees; a 404 otherwise."""
    return visible_object_or_404(user, Incident.objects.all(), pk=incident_id)
