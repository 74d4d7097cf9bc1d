"""The restore-mode banner on every page of a signed-in reader: when the lost window began, and
how many effects it put in doubt are still to be settled (`ledger.restore`)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from ledger.restore import mode
from reviews.access.checks import can_read


def restore(request: HttpRequest) -> dict[str, Any]:
    """Lazy, as the other banners: htmx partials that do not show it cost no query."""
    if not can_read(request.user):
        return {"restore_mode": None}
    return {"restore_mode": SimpleLazyObject(lambda: mode.status() if mode.current() else {})}
