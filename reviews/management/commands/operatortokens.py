"""Operators' personal tokens from the shell, for an admin (offboarding, a token seen in a log):
`manage.py operatortokens list [--user NAME]`, `manage.py operatortokens revoke elop_<prefix>`.
People make and revoke their own on the API tokens page (`reviews.views.tokens`); the token
itself is never shown here, only its public prefix.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models.functions import Now
from django.utils import timezone

from reviews.models import OperatorToken
from reviews.operatorapi.tokens import PREFIX


def _state(token: OperatorToken) -> str:
    if token.revoked_at is not None:
        return f"revoked {token.revoked_at:%Y-%m-%d %H:%M}"
    if token.expires_at <= timezone.now():
        return "expired"
    return "live"


class Command(BaseCommand):
    help = "List operators' API tokens, or revoke one by its public prefix."

    def add_arguments(self, parser: CommandParser) -> None:
        verbs = parser.add_subparsers(dest="verb", required=True)
        listing = verbs.add_parser("list", help="every token (or one person's)")
        listing.add_argument("--user", default="", help="only this account's tokens")
        revoking = verbs.add_parser("revoke", help="end a token at once")
        revoking.add_argument("prefix", help="the token's public part, elop_<12 hex>")

    def handle(self, *args: Any, verb: str, **options: Any) -> None:
        if verb == "revoke":
            self._revoke(options["prefix"])
            return
        tokens = OperatorToken.objects.select_related("user").prefetch_related("teams")
        if options["user"]:
            tokens = tokens.filter(user__username=options["user"])
        for token in tokens:
            teams = ", ".join(t.name for t in token.teams.all()) or "all of theirs"
            used = f"{token.last_used_at:%Y-%m-%d %H:%M}" if token.last_used_at else "never"
            self.stdout.write(
                f"{token.shown}  {token.user.get_username()}  {token.name!r}  "
                f"scopes {','.join(token.scopes)}  teams {teams}  "
                f"expires {token.expires_at:%Y-%m-%d %H:%M}  last used {used}  {_state(token)}"
            )

    def _revoke(self, shown: str) -> None:
        prefix = shown.removeprefix(PREFIX).split("_", 1)[0]
        token = OperatorToken.objects.filter(prefix=prefix).select_related("user").first()
        if token is None:
            raise CommandError(f"No operator token {shown!r}.")
        if not OperatorToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=Now()
        ):
            raise CommandError(f"{token.shown} was revoked already.")
        self.stdout.write(f"Revoked {token.shown} ({token.name!r}) of {token.user.get_username()}.")
