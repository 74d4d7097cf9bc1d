from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.policy.toolfile import ToolFileError, load


class Command(BaseCommand):
    help = "Declare tools (capabilities, policy, reconciler, compensated_by) from a TOML file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)

    def handle(self, *args: Any, file: Path, **options: Any) -> None:
        try:
            results = load(file)
        except ToolFileError as exc:
            raise CommandError(str(exc)) from None
        for name, created in results:
            self.stdout.write(f"{'created' if created else 'updated'} tool {name}")
