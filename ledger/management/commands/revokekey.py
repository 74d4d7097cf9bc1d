from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.containment.keys import revoke
from ledger.policy.agentkeys import key_prefix


class Command(BaseCommand):
    help = "Revoke an agent key by its prefix (elk_live_1a2b3c4d5e6f, elk_1a2b3c4d5e6f or 1a2b…)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("prefix")

    def handle(self, *args: Any, prefix: str, **options: Any) -> None:
        prefix = key_prefix(prefix) or prefix
        if not revoke(prefix):
            raise CommandError(f"No live key has the prefix {prefix!r}.")
        self.stdout.write(f"Revoked key {prefix}.")
