from __future__ import annotations

import getpass
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.containment.halts import halt
from ledger.errors import LedgerError
from ledger.rules.halts import active_halts, described


def add_subject(parser: CommandParser) -> None:
    """--tool X | --agent A | --run R | --all: what a halt or resume is about."""
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--tool", help="Halt claims of this tool's effects.")
    group.add_argument("--agent", help="Halt claims of this agent's actions.")
    group.add_argument("--run", help="Halt claims of this run_id's actions (every agent's).")
    group.add_argument("--all", action="store_true", help="Halt every claim of an action.")
    parser.add_argument("--reason", required=True, help="Why (recorded with the decision).")


def subject_of(options: dict[str, Any]) -> tuple[str, str]:
    for scope in ("tool", "agent", "run"):
        if options.get(scope) is not None:
            return scope, options[scope]
    return "all", ""


def shell_user() -> str:
    """Who, in the decision's record: the operating-system user running the command."""
    try:
        return f"shell:{getpass.getuser()}"
    except (KeyError, OSError):
        return "shell:unknown"


class Command(BaseCommand):
    help = (
        "Halt claims: --tool X | --agent A | --run R | --all, with --reason. "
        "Recorded as a decision; `resume` resumes them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_subject(parser)
        parser.add_argument(
            "--include-compensations",
            action="store_true",
            help="Also stop compensations (refunds) that an agent, run or --all halt lets run.",
        )

    def handle(self, *args: Any, reason: str, include_compensations: bool, **options: Any) -> None:
        scope, value = subject_of(options)
        try:
            switched = halt(
                scope,
                value,
                reason=reason,
                by=shell_user(),
                include_compensations=include_compensations,
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.detail} {exc.extra.get('fields', '')}".strip()) from None
        made = switched.halt
        if switched.changed:
            self.stdout.write(f"Halted (halt {made.pk}). {described(made)}")
        else:
            self.stdout.write(
                f"Already halted since {made.since:%Y-%m-%d %H:%M:%S %Z} (halt {made.pk}); "
                f"nothing changed. {described(made)}"
            )
        for active in active_halts():
            self.stdout.write(f"  active: halt {active.pk}: {described(active)}")
