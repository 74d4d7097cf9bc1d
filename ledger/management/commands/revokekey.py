from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.agentkeys import revoke


class Command(BaseCommand):
    help = "Revoke an agent key by its prefix (the 12 characters after 'elk_')."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        prefix = prefix.removeprefix("elk_")[:12]
        if not revoke(prefix):
            raise CommandError(f"No live key has the prefix {prefix!r}.")
        self.stdout.write(f"Revoked key {prefix}.")
