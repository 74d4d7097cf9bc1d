from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.errors import LedgerError
from ledger.management.commands.halt import shell_user
from ledger.restore import mode


def instant(text: str) -> datetime:
    """An ISO 8601 time; one without an offset is taken as UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(
            f"--lost-since {text!r} is not an ISO 8601 time (2026-12-04T10:15:00Z)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Restore mode, after the database went back in time (a restore, a failover that lost "
        "commits): `begin --lost-since TIME --reason …` enters it by hand; `status` prints what "
        "is left to check; `end --reason …` ends it; `check` compares with the witness now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        begin = actions.add_parser("begin", help="Enter restore mode by hand.")
        begin.add_argument(
            "--lost-since",
            required=True,
            help="From when the database may have lost commits (ISO 8601; UTC if no offset).",
        )
        begin.add_argument("--reason", required=True, help="Why (recorded with the decision).")
        end = actions.add_parser("end", help="End restore mode, whatever is left unchecked.")
        end.add_argument("--reason", required=True, help="Why (recorded with the decision).")
        actions.add_parser("status", help="Whether restore mode is on, and what is left.")
        actions.add_parser("check", help="Compare the database with the witness now.")

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        try:
            if action == "begin":
                entered = mode.begin(
                    lost_since=instant(options["lost_since"]),
                    reason=options["reason"],
                    by=shell_user(),
                )
                if not entered.new:
                    self.stdout.write(f"Restore mode is already on (window {entered.window.pk}).")
            elif action == "end":
                window = mode.end(reason=options["reason"], by=shell_user())
                self.stdout.write(f"Restore mode ended (window {window.pk}).")
                return
            elif action == "check":
                if mode.witnesses.path() is None:
                    raise CommandError("No witness is configured (LEDGER_WITNESS_PATH).")
                mode.check_witness()
        except LedgerError as exc:
            raise CommandError(f"{exc.detail} {exc.extra.get('fields', '')}".strip()) from None
        self.stdout.write(json.dumps(mode.status(), default=str, indent=2))
