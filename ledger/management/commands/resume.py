from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.containment.halts import active, resume
from ledger.errors import LedgerError
from ledger.management.commands.halt import add_subject, shell_user, subject_of


class Command(BaseCommand):
    help = "Lift a halt: --tool X | --agent A | --run R | --all, with --reason. Recorded too."

    def add_arguments(self, parser: CommandParser) -> None:
        add_subject(parser)

    def handle(self, *args: Any, reason: str, **options: Any) -> None:
        scope, value = subject_of(options)
        try:
            switched = resume(active(scope, value).pk, reason=reason, by=shell_user())
        except LedgerError as exc:
            raise CommandError(f"{exc.detail} {exc.extra.get('fields', '')}".strip()) from None
        lifted = switched.halt
        what = "everything" if lifted.scope == "all" else f"{lifted.scope} {lifted.value!r}"
        if switched.changed:
            self.stdout.write(f"Resumed {what} (halt {lifted.pk} lifted).")
        else:
            # Someone else lifted it between our look-up and our update.
            self.stdout.write(f"Halt {lifted.pk} of {what} was lifted by {lifted.lifted_by}.")
