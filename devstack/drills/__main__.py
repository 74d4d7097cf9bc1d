"""`make drills`: the fault drills with settings of their own, outside any stack.

    python -m devstack.drills postgres redis web failover-sync failover-async restore [OPTIONS]

Unlike `manage.py faultdrill`, which takes its settings from the environment (or `var/run.env`),
this sets the conductor's own before Django starts (`devstack.drills.environment`): no database
or key of `make run`, or of anything else, is needed or read.
"""

from __future__ import annotations

import argparse
import os
import sys

from devstack.drills.environment import conductor_environment, is_callers


def main(argv: list[str]) -> int:
    for name in [name for name in os.environ if is_callers(name)]:
        del os.environ[name]
    os.environ.update(conductor_environment())
    import django

    django.setup()
    from devstack.drills.cli import HELP, UsageError, add_arguments, execute

    parser = argparse.ArgumentParser(prog="python -m devstack.drills", description=HELP)
    add_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        failed = execute(options, sys.stdout)
    except UsageError as exc:
        parser.error(str(exc))
    if failed:
        print(f"drills with failed checks: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
