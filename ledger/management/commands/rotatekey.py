from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.env import parse_duration
from ledger.containment.keys import ReservedAgent, rotate
from ledger.models import Agent


class Command(BaseCommand):
    help = (
        "Issue an agent a new key; its other live keys expire after --expire-old-after "
        "(default 24h), so both work while clients move over. Prints the new key last."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent")
        parser.add_argument(
            "--expire-old-after",
            default="24h",
            metavar="DURATION",
            help="how long the old keys keep working: 90s, 15m, 24h, 7d (0 expires them now)",
        )
        parser.add_argument("--label", default="", help="A note on what the new key is for.")

    def handle(
        self, *args: Any, agent: str, expire_old_after: str, label: str, **options: Any
    ) -> None:
        try:
            overlap = timedelta(seconds=parse_duration(expire_old_after))
        except ValueError as exc:
            raise CommandError(f"--expire-old-after: {exc}") from None
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            raise CommandError(f"No agent is named {agent!r}.")
        if not found.is_active:
            raise CommandError(f"Agent {agent!r} is deactivated; reactivate it in the admin first.")
        try:
            key, expiring = rotate(found, expire_old_after=overlap, label=label)
        except ReservedAgent as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"Rotated the keys of {agent!r}: {expiring} old key(s) expire in {expire_old_after}. "
            "The new key is shown once; store it now:"
        )
        self.stdout.write(key)
