"""Template context every page needs: what the signed-in user may do, and the time."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from reviews.access import can_act, can_read


def roles(request: HttpRequest) -> dict[str, Any]:
    user = request.user
    return {"can_act": can_act(user), "can_read": can_read(user), "now": timezone.now()}
