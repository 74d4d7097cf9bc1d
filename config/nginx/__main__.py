"""`python -m config.nginx render|run`: see `config.nginx`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.nginx import render
from config.nginx.process import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m config.nginx",
        description="The front server: nginx in front of gunicorn, from the ledger's settings.",
    )
    parser.add_argument(
        "command",
        choices=("render", "run"),
        help="render: print nginx.conf; run: render it under --prefix and run nginx",
    )
    parser.add_argument("--listen", required=True, help="HOST:PORT (or [V6]:PORT) to serve on")
    parser.add_argument("--upstream", required=True, help="gunicorn's address: unix:PATH")
    parser.add_argument(
        "--prefix",
        type=Path,
        required=True,
        help="a directory of nginx's own: its pid file and temporary files",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "render":
            sys.stdout.write(render(args.listen, args.upstream, args.prefix.resolve()))
            return 0
        return run(args.listen, args.upstream, args.prefix)
    except (ValueError, OSError, ImproperlyConfigured) as exc:
        parser.exit(2, f"config.nginx: {exc}\n")
    return 2


if __name__ == "__main__":
    sys.exit(main())
