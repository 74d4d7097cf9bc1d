from __future__ import annotations

import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devstack.crashtest import callers
from devstack.crashtest.run import KEYS, PROVIDERS, Options, run


class Command(BaseCommand):
    help = (
        "Run payment workflows against the sandbox provider while SIGKILLing workers (before "
        "sending, during the provider call, after the provider committed, before the outcome "
        "is recorded), the ledger's web processes and rq workers; then compare the "
        "provider's transactions, the ledger and the expected outcome. Exits 1 on any "
        "duplicate or unexplained outcome, and with --provider lookup-only or statement on any "
        "review item left for people. Uses its own database, <DATABASE_URL name>_crashtest."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workflows", type=int, default=100)
        parser.add_argument("--workers", type=int, default=8)
        parser.add_argument("--crashes", type=int, default=110)
        parser.add_argument(
            "--infra-kills",
            type=int,
            default=10,
            help="Of the crashes, how many kill the web process or the rq worker.",
        )
        parser.add_argument(
            "--provider",
            choices=[*PROVIDERS, *callers.names()],
            default=KEYS,
            help="keys: honours idempotency keys (the default); lookup-only: keeps and searches "
            "them as references but does not deduplicate; statement: neither keys nor lookup, "
            "the run imports the provider's statements. Or a real provider (stripe, slack, …): "
            "its official SDK against its fake, the ledger asking through its adapter.",
        )
        parser.add_argument(
            "--ignore-keys",
            action="store_true",
            help="With --provider keys: the provider ignores idempotency keys after all.",
        )
        parser.add_argument(
            "--inject-duplicate",
            action="store_true",
            help="Self-check: charge once behind the ledger's back; must fail.",
        )
        parser.add_argument(
            "--web", type=int, default=1, help="gunicorn instances, each on its own port."
        )
        parser.add_argument("--rq-workers", type=int, default=1, help="rq workers.")
        parser.add_argument(
            "--qcluster",
            action="store_true",
            help="Also run one django-q2 cluster with the real schedules.",
        )
        parser.add_argument("--timeout", type=float, default=540.0)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument(
            "--redis-db",
            type=int,
            default=14,
            help="The Redis database the run uses (emptied first).",
        )
        parser.add_argument("--report", type=Path, default=Options.report)

    def handle(self, *args: Any, **o: Any) -> None:
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
        # SIGTERM unwinds like Ctrl-C, so that every process the run started is stopped.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
        if o["crashes"] - o["infra_kills"] > o["workflows"]:
            raise CommandError("Each workflow takes one worker crash: raise --workflows.")
        if o["ignore_keys"] and o["provider"] != KEYS:
            raise CommandError("--ignore-keys applies to --provider keys only.")
        if o["web"] < 1 or o["rq_workers"] < 1:
            raise CommandError("--web and --rq-workers need at least one process each.")
        opts = Options(
            workflows=o["workflows"],
            workers=o["workers"],
            crashes=o["crashes"],
            infra_kills=o["infra_kills"],
            provider=o["provider"],
            ignore_keys=o["ignore_keys"],
            inject_duplicate=o["inject_duplicate"],
            timeout=o["timeout"],
            seed=o["seed"],
            report=o["report"],
            redis_db=o["redis_db"],
            web=o["web"],
            rq_workers=o["rq_workers"],
            qcluster=o["qcluster"],
        )
        verdict = run(opts)
        opts.report.parent.mkdir(parents=True, exist_ok=True)
        opts.report.write_text(json.dumps(verdict.as_json(), indent=2))
        self.stdout.write(verdict.table())
        self.stdout.write(f"report: {opts.report}")
        for item in verdict.duplicates + verdict.unexplained:
            self.stdout.write(f"  ! {item}")
        if not verdict.ok:
            raise CommandError(
                "duplicates, unexplained outcomes or review items left for people found"
            )
