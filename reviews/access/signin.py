"""Signing in to the pages: django-axes' database handler, with one rule of our own.

axes locks (`AXES_LOCKOUT_PARAMETERS`) one account at one address, and one address, each after
`AXES_FAILURE_LIMIT` failures within the cool-off. It never locks an account at every address:
whoever knows a user name could then lock that person out from wherever they sign in, an
operator in the middle of an incident included.

Guessing one account from many addresses is slowed instead (`LockoutHandler`): once the account
has `LEDGER_LOGIN_ACCOUNT_LIMIT` failures, counted over the attempts whose last failure falls
within `LEDGER_LOGIN_ACCOUNT_WINDOW` seconds, it is refused (429) from every address it has not
signed in from successfully within `KNOWN_FOR` (axes' access log), until those failures age out
of the window. Its owner, at an address they used before, signs in as usual; a guesser there
still meets the per-address limits.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username
from axes.models import AccessAttempt, AccessLog
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest
from django.utils import timezone

# How long a successful sign-in from an address keeps it known for that account.
KNOWN_FOR = timedelta(days=90)


def account_guessed(request: HttpRequest, credentials: dict[str, Any] | None) -> bool:
    """Whether the account named has failed too often lately, across all addresses, for a
    sign-in from this request's address, which it has not signed in from lately."""
    username = get_client_username(request, credentials)
    if not username:
        return False
    now = timezone.now()
    window = timedelta(seconds=settings.LEDGER_LOGIN_ACCOUNT_WINDOW)
    failures = AccessAttempt.objects.filter(
        username=username, attempt_time__gte=now - window
    ).aggregate(n=Sum("failures_since_start"))["n"]
    if (failures or 0) < settings.LEDGER_LOGIN_ACCOUNT_LIMIT:
        return False
    known = AccessLog.objects.filter(
        username=username,
        ip_address=getattr(request, "axes_ip_address", None),
        attempt_time__gte=now - KNOWN_FOR,
    )
    return not known.exists()


class LockoutHandler(AxesDatabaseHandler):
    """axes' handler, also refusing a much-guessed account at addresses it does not know."""

    def is_locked(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> bool:
        return super().is_locked(request, credentials) or account_guessed(request, credentials)

    def user_login_failed(
        self,
        sender: Any,
        credentials: dict[str, Any],
        request: HttpRequest | None = None,
        **kwargs: Any,
    ) -> None:
        super().user_login_failed(sender, credentials, request, **kwargs)
        # As axes does for its own limits: the failure that reaches the limit is answered as a
        # lockout (429) already, and so is every refused attempt after it.
        if request is None or getattr(request, "axes_locked_out", False):
            return
        if account_guessed(request, credentials):
            request.axes_locked_out = True  # type: ignore[attr-defined]
            request.axes_credentials = credentials  # type: ignore[attr-defined]
