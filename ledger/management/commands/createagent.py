from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.containment.keys import ReservedAgent, issue_key
from ledger.models import Agent, Mode


class Command(BaseCommand):
    help = "Create an agent identity (or add a key to an existing one); prints the key last."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--label", default="", help="A note on what the key is for.")
        parser.add_argument(
            "--mode",
            choices=Mode.values,
            help="test or live (the default for a new agent); set once, when the agent is created",
        )

    def handle(self, *args: Any, name: str, label: str, mode: str | None, **options: Any) -> None:
        name = name.strip()
        if not name or len(name) > 100:
            raise CommandError("The agent name must be 1–100 characters.")
        agent, created = Agent.objects.get_or_create(
            name=name, defaults={"mode": mode or Mode.LIVE}
        )
        if mode is not None and agent.mode != mode:
            # Its keys and its effects are of its mode: changing it would mix the two.
            raise CommandError(f"Agent {name!r} exists as a {agent.mode} agent.")
        if not agent.is_active:
            raise CommandError(f"Agent {name!r} is deactivated; reactivate it in the admin first.")
        try:
            key = issue_key(agent, label=label)
        except ReservedAgent as exc:
            raise CommandError(str(exc)) from None
        what = "Created agent" if created else "Added a key to agent"
        self.stdout.write(f"{what} {name!r}. The key is shown once; store it now:")
        self.stdout.write(key)
