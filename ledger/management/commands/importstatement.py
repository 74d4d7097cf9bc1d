from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.management.commands.halt import shell_user
from ledger.models import StatementImport
from ledger.statements import StatementError, import_statement, resume

# What the command prints of an import, in this order.
SHOWN = (
    ("lines", "lines in the file"),
    ("lines_new", "new"),
    ("lines_changed", "changed (revision)"),
    ("lines_unchanged", "unchanged (revision)"),
    ("lines_removed", "removed (revision)"),
    ("lines_matched", "naming an effect"),
    ("confirmed", "effects confirmed"),
    ("failed", "effects failed"),
    ("retried", "effects back to planned (absence proven)"),
    ("reviews", "review items"),
    ("duplicates", "duplicates"),
    ("orphans", "orphan incidents"),
    ("batches", "batches"),
)


def moment(value: str) -> datetime:
    """An ISO 8601 time with a UTC offset, or a date (its midnight, UTC)."""
    try:
        if len(value) == 10:
            day = date.fromisoformat(value)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"{value!r} is not an ISO 8601 time or date.") from None
    if parsed.tzinfo is None:
        raise CommandError(f"{value!r} has no UTC offset (add Z or +00:00).")
    return parsed


class Command(BaseCommand):
    help = (
        "Import a provider statement (CSV or JSON Lines, by extension) for TOOL covering "
        "[--period-start, --period-end): parsed all-or-nothing, then applied in batches. "
        "Final unless --provisional. --resume ID finishes an interrupted import."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tool", nargs="?", help="The tool whose provider wrote the file.")
        parser.add_argument("file", nargs="?", type=Path, help="The statement file.")
        parser.add_argument("--period-start", type=moment, help="ISO 8601 (UTC offset) or date.")
        parser.add_argument("--period-end", type=moment, help="ISO 8601 (UTC offset) or date.")
        parser.add_argument(
            "--provisional",
            action="store_true",
            help="The provider may still change it: it confirms, but never proves absence.",
        )
        parser.add_argument("--resume", type=int, metavar="ID", help="Finish import ID.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["resume"] is not None:
                made = resume(options["resume"])
            else:
                made = self._import(options)
        except StatementError as exc:
            raise CommandError(str(exc)) from None
        self.report(made)

    def _import(self, options: dict[str, Any]) -> StatementImport:
        missing = [
            name for name in ("tool", "file", "period_start", "period_end") if options[name] is None
        ]
        if missing:
            shown = ", ".join(n.replace("_", "-") for n in missing)
            raise CommandError(f"Give {shown} (or --resume ID).")
        path: Path = options["file"]
        if not path.is_file():
            raise CommandError(f"No such file: {path}")
        return import_statement(
            options["tool"],
            path,
            filename=path.name,
            period_start=options["period_start"],
            period_end=options["period_end"],
            provisional=options["provisional"],
            by=shell_user(),
            origin="command",
        )

    def report(self, made: StatementImport) -> None:
        kind = "provisional" if made.provisional else "final"
        self.stdout.write(
            f"Import {made.pk}: {made.tool} {kind} statement {made.filename} "
            f"[{made.period_start.isoformat()}, {made.period_end.isoformat()}) "
            f"by {made.imported_by}, sha256 {made.sha256}, {made.phase}"
        )
        if made.revises:
            self.stdout.write(f"  revises import(s) {', '.join(map(str, made.revises))}")
        for name, label in SHOWN:
            self.stdout.write(f"  {label}: {getattr(made, name)}")
