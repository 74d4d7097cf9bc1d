from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.models import Agent
from ledger.policy.agentkeys import keys_of

_COLUMNS = ("prefix", "label", "created", "last used", "expires", "revoked")


def _when(value: datetime | None, empty: str) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if value else empty


class Command(BaseCommand):
    help = "List an agent's keys: prefix, created, last used, expires, revoked (never secrets)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent")

    def handle(self, *args: Any, agent: str, **options: Any) -> None:
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            raise CommandError(f"No agent is named {agent!r}.")
        rows = [
            (
                key.prefix,
                key.label or "-",
                _when(key.created_at, "-"),
                # Stamped at most once a minute, by calls that write (a GET alone does not).
                _when(key.last_used_at, "never"),
                _when(key.expires_at, "never"),
                _when(key.revoked_at, "no"),
            )
            for key in keys_of(found)
        ]
        self.stdout.write(f"Agent {agent!r} ({found.mode}), {len(rows)} key(s):")
        widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
        for row in [_COLUMNS, *rows]:
            self.stdout.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )
