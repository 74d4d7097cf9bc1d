from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.models import Agent
from ledger.policy.money import amount_limits


class Command(BaseCommand):
    help = (
        "Set an agent's limits: claims per calendar minute and amount per rolling 24 h "
        "(per currency). Without options, show them."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("agent")
        parser.add_argument("--claims-per-minute", type=int, metavar="N")
        parser.add_argument(
            "--amount-per-day",
            action="append",
            default=[],
            metavar="X:CUR",
            help='e.g. 500.00:EUR; repeat for more currencies ("0:EUR" allows none)',
        )
        parser.add_argument("--clear", action="store_true", help="remove every limit first")

    def handle(self, *args: Any, agent: str, **options: Any) -> None:
        found = Agent.objects.filter(name=agent).first()
        if found is None:
            raise CommandError(f"No agent is named {agent!r}.")
        per_minute = options["claims_per_minute"]
        if per_minute is not None and per_minute < 1:
            raise CommandError("--claims-per-minute must be a positive integer.")
        amounts: dict[str, str] = {}
        for spec in options["amount_per_day"]:
            amount, _, currency = spec.rpartition(":")
            try:
                amount_limits({currency: amount})
            except ValueError as exc:
                raise CommandError(f"--amount-per-day {spec!r}: {exc}") from None
            amounts[currency.upper()] = amount
        if options["clear"]:
            found.limit_claims_per_minute = None
            found.limit_amount_per_day = {}
        if per_minute is not None:
            found.limit_claims_per_minute = per_minute
        found.limit_amount_per_day = {**found.limit_amount_per_day, **amounts}
        found.save(update_fields=["limit_claims_per_minute", "limit_amount_per_day"])
        per_day = ", ".join(f"{a} {c}" for c, a in sorted(found.limit_amount_per_day.items()))
        self.stdout.write(
            f"Agent {agent!r}: claims per minute: {found.limit_claims_per_minute or 'no limit'}; "
            f"amount per 24 h: {per_day or 'no limit'}"
        )
