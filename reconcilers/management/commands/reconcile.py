from __future__ import annotations

import signal
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from reconcilers.jobs import drain
from reconcilers.schedules import queue_expired_leases, sweep
from reconcilers.tailcheck import run_due as run_tail_checks


class Command(BaseCommand):
    help = (
        "Reconcile in a loop without Redis: move expired leases into reconciliation, check "
        "whatever is due, and run due tail checks. The ledger is the queue, so any number of "
        "these can run side by side."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--interval", type=float, default=1.0, help="Seconds between idle polls."
        )
        parser.add_argument("--once", action="store_true", help="One pass, then exit.")
        parser.add_argument(
            "--sweep-only",
            action="store_true",
            help="Only sweep (expired leases, wake-ups through rq for what is due), as the "
            "django-q2 schedule does, but every --interval seconds; rq workers check.",
        )

    def handle(
        self, *args: Any, interval: float, once: bool, sweep_only: bool, **options: Any
    ) -> None:
        stopping = False

        def stop(signum: int, frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        while not stopping:
            if sweep_only:
                sweep()
                checked = 0
            else:
                queue_expired_leases()
                checked = drain()
            run_tail_checks()
            if once:
                break
            if not checked:
                time.sleep(interval)
