"""`manage.py sandbox payments|messaging`: run a sandbox provider until SIGTERM or SIGINT.

Django only parses the arguments here; the provider itself is plain standard library and
runs the same as `python -m devstack.sandbox.<name>`.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devstack.sandbox.faults import FaultError
from devstack.sandbox.messaging import MessagingProvider
from devstack.sandbox.payments import PaymentsProvider
from devstack.sandbox.service import ASYNC_OPTIONS, Provider, add_arguments, options_from, serve

PROVIDERS: dict[str, type[Provider]] = {
    provider.name: provider for provider in (PaymentsProvider, MessagingProvider)
}


class Command(BaseCommand):
    help = "Run a sandbox provider (a fake outside world) until SIGTERM or SIGINT."
    # It serves no Django code, so it needs neither the system checks nor a database.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("provider", choices=sorted(PROVIDERS))
        add_arguments(parser, payments=True)

    def handle(self, *args: Any, provider: str, **options: Any) -> None:
        chosen = PROVIDERS[provider]
        if not chosen.takes_async:
            given = [name for name in ASYNC_OPTIONS if options.get(name)]
            if given:
                flag = "--" + given[0].replace("_", "-")
                raise CommandError(f"{flag} applies to the payments provider only.")
        try:
            settings = options_from(options, chosen)
        except (FaultError, ValueError) as error:
            raise CommandError(str(error)) from None
        serve(chosen(settings))
