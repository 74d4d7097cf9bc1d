"""Telling an agent that its effect's status changed: what it may ask for, and where it comes from.

Every status change, whoever makes it, fires the trigger of migration 0013 inside its own
transaction: `NOTIFY ledger_effects, '<effect id>'`, which wakes the long polls of every process
at commit (`ledger.longpoll`), and, for an effect recorded with a `callback_url`, one row in the
alert outbox (kind `callback`, key "<effect id>:<version>"), which the outbox's one sender
(`reviews.alerts`) posts, signed, to that URL. A change that rolls back tells nobody.

A callback URL must name one of `LEDGER_CALLBACK_HOSTS` exactly: the ledger posts to it from
inside the network, so an agent must not be able to point it anywhere else.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings

# The channel the trigger notifies on (its SQL names it too).
CHANNEL = "ledger_effects"


def allowed_callback_url(value: str) -> str:
    """The URL as given, or ValueError naming what is wrong (the API answers 422)."""
    try:
        parts = urlsplit(value)
        port = parts.port  # parses it: a malformed port raises here
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http(s) URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not carry credentials")
    if port == 0:
        raise ValueError("must not name port 0")
    if parts.hostname.lower() not in settings.LEDGER_CALLBACK_HOSTS:
        raise ValueError(f"host {parts.hostname!r} is not allowed for callbacks")
    return value
