"""`manage.py linkaccounts olga sso.abcd1234.00u1xyz`: two accounts of one person.

Four-eyes then treats them as one (neither may approve what the other asked for), and once
one of the person's accounts signs in through the identity provider, the local one can no
longer sign in with its password. `--unlink olga` gives an account a person of its own again;
`--show olga` lists the person's accounts.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviews.models import Identity
from reviews.sso import people


def _user(username: str) -> User:
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise CommandError(f"No account named {username!r}.") from None


def _describe(user: User) -> str:
    identity = Identity.objects.filter(user=user).first()
    how = f"SSO, {identity.subject} at {identity.issuer}" if identity else "local"
    name = f", {user.get_full_name()}" if user.get_full_name() else ""
    return f"{user.get_username()} ({how}{name})"


class Command(BaseCommand):
    help = "Link accounts of one person (a local account and an SSO account), or unlink one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("usernames", nargs="+", metavar="username")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--unlink", action="store_true", help="give the account its own person")
        group.add_argument("--show", action="store_true", help="list the person's accounts")

    def handle(self, *args: Any, usernames: list[str], **options: Any) -> None:
        accounts = [_user(name) for name in usernames]
        if options["show"] or options["unlink"]:
            for user in accounts:
                if options["unlink"]:
                    people.unlink(user)
                    self.stdout.write(f"Unlinked {user.get_username()}.")
                mates = ", ".join(_describe(u) for u in people.accounts_of(user))
                self.stdout.write(f"{user.get_username()}: one person with {mates}")
            return
        if len(accounts) < 2:
            raise CommandError("Name two or more accounts to link (or --show, --unlink).")
        first = accounts[0]
        for other in accounts[1:]:
            person = people.link(first, other)
        self.stdout.write(
            f"Linked as {person}: " + ", ".join(_describe(u) for u in people.accounts_of(first))
        )
