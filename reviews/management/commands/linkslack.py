"""`manage.py linkslack olga T0123ABCD U0456EFGH`: the Slack user U0456EFGH of workspace
T0123ABCD decides as olga when they press a button in Slack (ADR 0020).

An admin's way, on the server; a person links their own Slack user from the link Slack shows
them (`reviews.remote.slack.people`). `--unlink` ends a link (the username is then ignored
and may be `-`); `--show olga` lists the account's links.
"""

from __future__ import annotations

import getpass
import re
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from reviews.remote.slack import people

_SLACK_ID = re.compile(r"[A-Z0-9]{2,32}")


def _slack_id(value: str, what: str) -> str:
    if not _SLACK_ID.fullmatch(value):
        raise CommandError(f"{value!r} is not a Slack {what} id (capital letters and digits).")
    return value


class Command(BaseCommand):
    help = "Link a Slack user (workspace id, user id) to an account, or unlink one."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("team_id", nargs="?", help="the Slack workspace's id, T…")
        parser.add_argument("slack_user", nargs="?", help="the Slack user's id, U… or W…")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--unlink", action="store_true", help="end the Slack user's link")
        group.add_argument("--show", action="store_true", help="list the account's links")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        if options["show"]:
            for link in people.links_of(_user(username)):
                self.stdout.write(f"{link.slack_user} in {link.team_id} (by {link.linked_by})")
            return
        team_id = _slack_id(options["team_id"] or "", "workspace")
        slack_user = _slack_id(options["slack_user"] or "", "user")
        if options["unlink"]:
            ended = people.unlink(team_id, slack_user)
            self.stdout.write(f"Unlinked {slack_user} in {team_id}." if ended else "Not linked.")
            return
        user = _user(username)
        try:
            made = people.link(team_id, slack_user, user, by=f"admin:{getpass.getuser()}")
        except people.AlreadyLinked as exc:
            raise CommandError(f"{exc} Unlink it first (--unlink).") from None
        said = "Linked" if made else "Already linked"
        self.stdout.write(f"{said}: {slack_user} in {team_id} decides as {user.get_username()}.")


def _user(username: str) -> User:
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist:
        raise CommandError(f"No account named {username!r}.") from None
