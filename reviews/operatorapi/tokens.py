"""Operators' personal tokens: made, shown once, kept as a digest, checked on every use.

A token reads `elop_<prefix>_<secret>`: twelve hex characters that find its row, then 43
characters of `secrets.token_urlsafe(32)` (256 random bits). Only the prefix and the SHA-256
digest of the whole token are stored: the token itself is shown once, on the page that made it,
and cannot be shown again. A high-entropy secret needs no slow hash: nobody can guess one from
its digest.

A person makes their own tokens (`issue`), each with a name, its scopes (`read`, `decide`), an
optional restriction to some of their own teams, and an expiry no further than `MAX_DAYS`
ahead; they revoke them (`revoke`). A token is refused (`authenticate`) once it is revoked or
expired, by the database clock, and its person is refused once deactivated or no longer an
operator (`reviews.access.checks.acts_now`), whenever the token was made.

Every use of a token presented whole is recorded (`OperatorTokenUse`: what was asked and how
the door answered) and logged with the token's id and public prefix, never the secret; an
accepted use moves `last_used_at`.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Iterable
from datetime import timedelta

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import (
    BooleanField,
    DateTimeField,
    ExpressionWrapper,
    Q,
    QuerySet,
)
from django.db.models.functions import Now

from ledger.errors import Forbidden, LedgerError, ValidationFailed
from ledger.models import Team
from ledger.policy.teams import scope_now
from reviews.access.checks import acts_now
from reviews.decisions.refusals import NotAnOperator
from reviews.models import OperatorToken, OperatorTokenUse, TokenScope

log = logging.getLogger(__name__)

PREFIX = "elop_"
SHAPE = re.compile(r"elop_([0-9a-f]{12})_[A-Za-z0-9_-]{43}")
# The furthest ahead a token may expire, in days.
MAX_DAYS = 90
REQUIRED = "A valid operator token is required (Authorization: Bearer elop_…)."


class TokenRefused(LedgerError):
    """No token, or one that is malformed, unknown, revoked or expired (401)."""

    status, code = 401, "unauthorized"


class ScopeMissing(Forbidden):
    """The token was not made for this (a `read` token asked to decide), 403."""

    code = "insufficient_scope"


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def teams_offered(user: User) -> QuerySet[Team]:
    """The teams a token of `user` may be restricted to: their own, or every team for whoever
    sees all of them (an admin, the "all teams" grant)."""
    scope = scope_now(user)
    teams = Team.objects.all() if scope is None else Team.objects.filter(pk__in=scope)
    return teams.order_by("name")


def _problems(user: User, name: str, scopes: set[str], teams: set[int], days: int) -> dict:
    problems = {}
    if not name.strip() or len(name) > 100:
        problems["name"] = "a name of 1 to 100 characters, to tell the token apart"
    if not scopes or not scopes <= set(TokenScope.values):
        problems["scopes"] = f"one or more of {', '.join(TokenScope.values)}"
    if not 1 <= days <= MAX_DAYS:
        problems["expires_in_days"] = f"from 1 to {MAX_DAYS} days"
    if not teams <= set(teams_offered(user).values_list("pk", flat=True)):
        problems["teams"] = "only teams you are in"
    return problems


def issue(
    user: User, *, name: str, scopes: Iterable[str], teams: Iterable[int] = (), days: int
) -> tuple[OperatorToken, str]:
    """Make a token for `user`: its row, and the token itself (to show once). Raises
    `ValidationFailed` for a missing name, an unknown scope, an expiry beyond `MAX_DAYS` or a
    team that is not the person's; `NotAnOperator` for a person who may not act."""
    wanted, chosen = set(scopes), set(teams)
    if not acts_now(user):
        raise NotAnOperator("Only an active operator makes operator tokens.")
    if problems := _problems(user, name, wanted, chosen, days):
        raise ValidationFailed("The token cannot be made.", problems)
    prefix = secrets.token_hex(6)
    raw = f"{PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    with transaction.atomic():
        token = OperatorToken.objects.create(
            user=user,
            name=name.strip(),
            prefix=prefix,
            digest=_digest(raw),
            scopes=sorted(wanted),
            expires_at=ExpressionWrapper(
                Now() + timedelta(days=days), output_field=DateTimeField()
            ),
        )
        token.teams.set(chosen)
    token.refresh_from_db()
    log.info("operator token %s (%s) made by %s", token.pk, token.shown, user.get_username())
    return token, raw


def tokens_of(user: User) -> list[OperatorToken]:
    """The person's own tokens, revoked ones too, with their teams: what the tokens page lists."""
    return list(OperatorToken.objects.filter(user=user).prefetch_related("teams"))


def owns(user: User, token_id: int) -> bool:
    """Whether the token is one of the person's own, revoked or not."""
    return OperatorToken.objects.filter(pk=token_id, user=user).exists()


def revoke(user: User, token_id: int) -> bool:
    """Revoke one of `user`'s own tokens; False when it is not theirs or was revoked already."""
    done = OperatorToken.objects.filter(pk=token_id, user=user, revoked_at__isnull=True).update(
        revoked_at=Now()
    )
    if done:
        log.info("operator token %s revoked by %s", token_id, user.get_username())
    return bool(done)


def _refusal(token: OperatorToken, scope: TokenScope) -> str:
    """Why the door refuses a token presented whole, or "ok"."""
    if token.revoked_at is not None:
        return "revoked"
    if token.expired:  # type: ignore[attr-defined]
        return "expired"
    if not acts_now(token.user):
        return NotAnOperator.code
    if scope not in token.scopes:
        return ScopeMissing.code
    return "ok"


def _record_use(token: OperatorToken, method: str, path: str, outcome: str) -> None:
    """The use, recorded and logged with the token's id and public prefix (never the secret);
    an accepted one moves `last_used_at`."""
    with transaction.atomic():
        OperatorTokenUse.objects.create(
            token=token, method=method[:10], path=path[:300], outcome=outcome
        )
        if outcome == "ok":
            OperatorToken.objects.filter(pk=token.pk).update(last_used_at=Now())
    log.info(
        "operator token %s (%s) of %s: %s %s: %s",
        token.pk,
        token.shown,
        token.user.get_username(),
        method,
        path[:300],
        outcome,
    )


def authenticate(raw: str, method: str, path: str, scope: TokenScope) -> OperatorToken:
    """The live token `raw`, made for `scope`, of a person who may act; every use of a token
    presented whole is recorded. Raises `TokenRefused` (401: no such token, malformed, revoked,
    expired), `NotAnOperator` (403: its person is deactivated or no longer an operator) or
    `ScopeMissing` (403)."""
    shape = SHAPE.fullmatch(raw)
    token = None
    if shape is not None:
        expired = ExpressionWrapper(Q(expires_at__lte=Now()), output_field=BooleanField())
        token = (
            OperatorToken.objects.select_related("user")
            .annotate(expired=expired)
            .filter(prefix=shape.group(1))
            .first()
        )
    if token is None or not hmac.compare_digest(token.digest, _digest(raw)):
        raise TokenRefused(REQUIRED)
    outcome = _refusal(token, scope)
    _record_use(token, method, path, outcome)
    if outcome == "revoked":
        raise TokenRefused(
            "This operator token was revoked; make a new one on the API tokens page."
        )
    if outcome == "expired":
        raise TokenRefused(
            "This operator token has expired; make a new one on the API tokens page."
        )
    if outcome == ScopeMissing.code:
        require(token, scope)
    if outcome != "ok":
        raise NotAnOperator(
            f"{token.user.get_username()} is deactivated or no longer an operator: their "
            "tokens open nothing."
        )
    return token


def require(token: OperatorToken, scope: TokenScope) -> None:
    """Refuse (403) a token not made for `scope`."""
    if scope not in token.scopes:
        raise ScopeMissing(
            f"This token was made for {', '.join(token.scopes)}, not {scope}.",
            scope=str(scope),
        )


def team_scope(token: OperatorToken) -> frozenset[int] | None:
    """The teams whose effects the token reaches, besides effects of no team; None for every
    team. Its person's teams as the database has them now, narrowed to the token's own teams
    when it names some (a team the person has left since is not reached)."""
    person = scope_now(token.user)
    named = frozenset(token.teams.values_list("pk", flat=True))
    if not named:
        return person
    return named if person is None else named & person
