from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.containment.halts import active, resume
from ledger.errors import LedgerError
from ledger.management.commands.halt import add_subject, shell_user, subject_of


class Command(BaseCommand):
    help = "Resume a halt: --tool X | --agent A | --run R | --all, with --reason. Recorded too."

    def add_arguments(self, parser: CommandParser) -> None:
        add_subject(parser)

    def handle(self, *args: Any, reason: str, **options: Any) -> None:
        scope, value = subject_of(options)
        try:
            switched = resume(
                active(scope, value).pk, reason=reason, by=shell_user(), channel="command"
            )
        except LedgerError as exc:
            raise CommandError(f"{exc.detail} {exc.extra.get('fields', '')}".strip()) from None
        halt = switched.halt
        what = "everything" if halt.scope == "all" else f"{halt.scope} {halt.value!r}"
        if switched.changed:
            self.stdout.write(f"Resumed {what} (halt {halt.pk}).")
        else:
            # Someone else resumed it between our look-up and our update.
            self.stdout.write(f"Halt {halt.pk} of {what} was resumed by {halt.resumed_by}.")
