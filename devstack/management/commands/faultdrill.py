from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devstack.drills.cli import HELP, UsageError, add_arguments, execute


class Command(BaseCommand):
    help = HELP
    # The drills serve nothing from this process's database: their processes run on private
    # servers with settings of their own (`devstack.drills.environment`) and check those. A
    # database used with other keys (a `make run`'s) is not theirs to judge.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            failed = execute(o, self.stdout)
        except UsageError as exc:
            raise CommandError(str(exc)) from None
        if failed:
            raise CommandError(f"drills with failed checks: {', '.join(failed)}")
