"""Opening review items: effects that no machine can resolve go to people."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection

from reviews.models import ReviewItem

_TABLE = ReviewItem._meta.db_table


def open_review(effect_id: Any, reason: str) -> bool:
    """Open a review item unless one is open already. Returns whether one was opened."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {_TABLE} (effect_id, reason, opened_at, due_at, resolution) "
            f"VALUES (%s, %s, now(), now() + make_interval(secs => %s), '') "
            f"ON CONFLICT (effect_id) WHERE resolved_at IS NULL DO NOTHING",
            [effect_id, reason, settings.LEDGER_BACKOFFICE_WINDOW],
        )
        return cursor.rowcount == 1
