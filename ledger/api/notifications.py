"""Telling an agent that its effect's status changed: what it may ask for, and where it comes from.

Every status change, whoever makes it, fires the trigger of migration 0013 inside its own
transaction: `NOTIFY ledger_effects, '<effect id>'`, which wakes the long polls of every process
at commit (`ledger.api.longpoll`), and, for an effect recorded with a `callback_url`, one row in the
alert outbox (kind `callback`, key "<effect id>:<version>"), which the outbox's one sender
(`reviews.alerts`) posts, signed, to that URL. A change that rolls back tells nobody.

A callback URL must fall under one of `LEDGER_CALLBACK_ALLOW` (origins or URL prefixes,
`ledger.api.callbacktargets`), checked on the exact string that is stored and later sent: the
ledger posts to it from inside the network, so an agent must not be able to point it anywhere
else, nor smuggle anything past the check that the sender would read differently.
"""

from __future__ import annotations

import functools

from django.conf import settings

from ledger.api import callbacktargets

# The channel the trigger notifies on (its SQL names it too).
CHANNEL = "ledger_effects"


@functools.lru_cache(maxsize=8)
def _parsed(entries: tuple[str, ...]) -> tuple[callbacktargets.Target, ...]:
    return callbacktargets.allow_list(entries)


def allowed_targets() -> tuple[callbacktargets.Target, ...]:
    """The allow-list as configured now (settings parsed it at start-up; tests may swap it)."""
    return _parsed(tuple(settings.LEDGER_CALLBACK_ALLOW))


def allowed_callback_url(value: str) -> str:
    """The URL exactly as given, or ValueError naming what is wrong (the API answers 422)."""
    callbacktargets.check(value, allowed_targets())
    return value
