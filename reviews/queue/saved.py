"""An operator's saved queue filters: a named query of the queue that one person keeps and
nobody else sees (`reviews.models.SavedFilter`; every read goes through its owner)."""

from __future__ import annotations

import contextlib
from typing import Any

from django.db import IntegrityError
from django.http import Http404, QueryDict

from reviews.models import SavedFilter
from reviews.queue.filters import valid_query

NAME_MAX = SavedFilter._meta.get_field("name").max_length
QUERY_MAX = SavedFilter._meta.get_field("query").max_length
# Parts of the queue's address that say where the page was, not what it filters.
TRANSIENT = ("page", "live")


class NotSaved(ValueError):
    """The name or the query cannot be kept: the message says why (a 400)."""


def saved_filters(user: Any) -> list[SavedFilter]:
    """The person's own saved filters, by name."""
    return list(SavedFilter.objects.filter(owner=user))


def keep(user: Any, name: str, query: str) -> str:
    """Keep the queue's query (`?tool=…&reason=…`) as the person's filter `name`; the same name
    replaces it. Returns the query as kept, without paging; raises `NotSaved`."""
    name = name.strip()
    asked = QueryDict(query.lstrip("?"), mutable=True)
    for transient in TRANSIENT:
        asked.pop(transient, None)
    encoded = asked.urlencode()
    if not name or len(name) > NAME_MAX:
        raise NotSaved(f"Name the filter (at most {NAME_MAX} characters).")
    if len(encoded) > QUERY_MAX:
        raise NotSaved("That filter is too long to save.")
    if not valid_query(asked):
        raise NotSaved("That filter is not valid.")
    # Saved twice at once under a new name: one insert wins, and the other stands.
    with contextlib.suppress(IntegrityError):
        SavedFilter.objects.update_or_create(owner=user, name=name, defaults={"query": encoded})
    return encoded


def forget(user: Any, filter_id: int) -> SavedFilter:
    """Delete one of the person's own saved filters and return it; anyone else's is a 404, as a
    missing one."""
    saved = SavedFilter.objects.filter(pk=filter_id, owner=user).first()
    if saved is None:
        raise Http404("No such saved filter.")
    saved.delete()
    return saved
