from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.audit import archive
from ledger.management.commands.halt import shell_user


def month(text: str) -> date:
    """YYYY-MM: the first day of that month."""
    if not re.fullmatch(r"\d{4}-\d{2}", text or "") or not 1 <= int(text[5:]) <= 12:
        raise CommandError(f"--before {text!r} is not a month written YYYY-MM (2026-09).")
    return date(int(text[:4]), int(text[5:]), 1)


class Command(BaseCommand):
    help = (
        "Archive the events of every month before --before: export them (CSV, JSON Lines and "
        "a manifest with the seal head at the cut), verify the export against the chain, then "
        "detach and drop their partitions, recording a checkpoint that verifyledger starts "
        "from. Refuses a month still inside the retention period, with events of effects not "
        "yet terminal, or not sealed. Exit status 1 at the first refusal."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--before", required=True, metavar="YYYY-MM")
        parser.add_argument(
            "--to",
            type=Path,
            metavar="DIR",
            help="Where the exports go, one directory per month (default: LEDGER_ARCHIVE_DIR).",
        )

    def handle(self, *args: Any, before: str, to: Path | None, **options: Any) -> None:
        first_kept = month(before)
        directory = to or Path(settings.LEDGER_ARCHIVE_DIR)
        months = archive.due(first_kept)
        if not months:
            self.stdout.write(f"No month before {first_kept:%Y-%m} is left to archive.")
            return
        by = shell_user()
        for part in months:
            try:
                done = archive.archive_month(part, directory, by=by)
            except archive.Refused as refusal:
                raise CommandError(f"Refused: {refusal}", returncode=1) from None
            except OSError as exc:
                raise CommandError(
                    f"Cannot write the export of {part.month} into {directory}: {exc}"
                ) from None
            past = f" ({done.beyond_cut} of its seals past the cut)" if done.beyond_cut else ""
            self.stdout.write(
                self.style.SUCCESS(
                    f"Archived {done.month}: {done.events} events exported to {done.location}, "
                    "verified against the chain, partition dropped; checkpoint at seal "
                    f"{done.cut_seq}{past}."
                )
            )
