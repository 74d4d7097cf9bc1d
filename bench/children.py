"""Benchmarks that measure each run in a child process of its own: the script starts itself
again with `--child WHAT` on the database it chose, so that the child's peak RSS (`ru_maxrss`)
is the measured work's alone, and reads the child's result from its last line of output (JSON).

Such a benchmark fills a database `<DATABASE_URL's database>_<suffix>` (`base_database_url`,
`bench.harness.bench_database`), hands each contender a fresh copy of it when the work writes
(`template_copy`), and drops them at the end unless `--keep-db`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from bench.harness import bench_env, drop_quietly, run_stoppable
from devstack.provision import database_url


def child_options(parser: argparse.ArgumentParser) -> None:
    """`--keep-db`, and the hidden `--child WHAT` a script passes to itself."""
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    parser.add_argument("--child", help=argparse.SUPPRESS)


def rss_mib() -> float:
    """This process's peak RSS so far, in MiB (`ru_maxrss` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_in_child(script: str, env: dict[str, str], what: str) -> dict[str, Any]:
    """Run `script --child what` with `env` and return the JSON of its last line of output."""
    child = subprocess.run(
        [sys.executable, script, "--child", what],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if child.returncode != 0:
        raise RuntimeError(f"child {what} failed:\n{child.stdout}\n{child.stderr}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def parent_or_child(
    child: str | None, in_child: Callable[[str], dict[str, Any]], benchmark: Callable[[], int]
) -> int:
    """A script's entry point: as a child, `in_child(what)` printed as its last line; else
    the whole benchmark, stoppable by Ctrl-C or SIGTERM."""
    if child:
        print(json.dumps(in_child(child), default=str))
        return 0
    return run_stoppable(benchmark, restore_sigint=True)


def base_database_url() -> str:
    """DATABASE_URL, which names the server and the database the bench's own are named after."""
    base_url = os.environ.get("DATABASE_URL", "")
    if not base_url:
        raise SystemExit(
            "DATABASE_URL must be set (run it through `python -m devstack.stack exec`)."
        )
    return base_url


def template_copy(base_url: str, template: str, name: str) -> dict[str, str]:
    """Database `name` made afresh as a copy of the filled database `template`, and the
    environment for a child on it."""
    import psycopg
    from psycopg import sql

    drop_quietly(base_url, name)
    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template)
            )
        )
    return bench_env(database_url(base_url, name))
