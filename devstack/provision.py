"""Databases and what fills them, through `manage.py` run in processes of their own: the one-off
setup of `make run` (`prepare`), and fresh databases for the benchmarks, the crash test and
the fault drills (`fresh_database`)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from devstack.embedded import ROOT, say

DEMO_AGENT = "demo"
DEMO_OPERATOR = "operator"


# --- manage.py -------------------------------------------------------------------------------


def manage_argv(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


class ManageFailed(RuntimeError):
    def __init__(self, args: tuple[str, ...], returncode: int, output: str) -> None:
        super().__init__(
            f"manage.py {' '.join(args)} failed with exit code {returncode}"
            + (f":\n{output}" if output else ".")
        )
        self.returncode = returncode


def manage(env: dict[str, str], *args: str, stdin: str | None = None, capture: bool = True) -> str:
    """Run a management command to the end in a process of its own and return its stdout.

    `capture=False` lets its output through to the terminal (and returns ""): for the long
    steps of `make run`, whose progress a person watches. A failure raises `ManageFailed`
    with what the command printed, so that the caller's message says why.
    """
    done = subprocess.run(
        manage_argv(*args),
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=capture,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ManageFailed(args, done.returncode, f"{done.stdout or ''}{done.stderr or ''}")
    return done.stdout or ""


# --- The one-off setup of `make run` ----------------------------------------------------


_EXISTING = (
    "import json; from django.contrib.auth.models import User; from ledger.models import Agent; "
    f"print(json.dumps([Agent.objects.filter(name={DEMO_AGENT!r}).exists(), "
    f"User.objects.filter(username={DEMO_OPERATOR!r}).exists()]))"
)


def prepare(env: dict[str, str], *, tools: Path = ROOT / "tools.toml") -> None:
    """Bring the database up to date, declare `tools`, and make sure there is someone to sign
    in as."""
    for args in (
        ("migrate", "--noinput"),
        ("collectstatic", "--noinput"),
        ("loadtools", str(tools)),
    ):
        say(f"manage.py {' '.join(args)}")
        manage(env, *args, capture=False)

    # One Django start-up answers both questions; the last stdout line is the answer.
    lines = manage(env, "shell", "-c", _EXISTING).strip().splitlines()
    agent_exists, operator_exists = json.loads(lines[-1])

    if not agent_exists:
        output = manage(env, "createagent", DEMO_AGENT, "--label", "created by make run")
        words = output.split()
        key = next((word for word in words if word.startswith("elk_")), words[-1])
        print(f"\nDemo agent key (shown once): {key}\n", flush=True)
    if not operator_exists:
        password = secrets.token_urlsafe(18)
        # createoperator reads the password from stdin when stdin is not a terminal.
        manage(env, "createoperator", DEMO_OPERATOR, "--role", "admin", stdin=password)
        print(f"\nDemo operator: {DEMO_OPERATOR} / {password} (shown once)\n", flush=True)


# --- Databases of their own (the benchmarks, the crash test, the drills) ---------------------


def database_url(url: str, name: str) -> str:
    """`url` pointing at database `name` instead (user, host, port and query kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def database_name(url: str) -> str:
    name = urlsplit(url).path.lstrip("/")
    if not name:
        raise SystemExit("DATABASE_URL names no database")
    return name


def drop_database(base_url: str, name: str) -> None:
    """Drop database `name` on the server of `base_url`, closing whatever is connected to it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def recreate_database(base_url: str, name: str) -> str:
    """Database `name`, empty, on the server of `base_url` (dropped first if it exists).
    Returns its URL."""
    import psycopg
    from psycopg import sql

    drop_database(base_url, name)
    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_url(base_url, name)


# Names a database on the same server that holds the migrations' result, to be copied instead
# of migrating each fresh database again: CREATE DATABASE … TEMPLATE takes about a second where
# the migrations take ten and more. Built by the first `migrated_database` that finds it
# missing; whoever sets the variable drops it when the migrations may have changed (the suite,
# at each start: tests/hermetic.py).
TEMPLATE_VARIABLE = "DEVSTACK_DATABASE_TEMPLATE"


def _exists(base_url: str, name: str) -> bool:
    import psycopg

    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
    return found is not None


def _migrate_into(env: dict[str, str], name: str) -> str:
    url = recreate_database(env["DATABASE_URL"], name)
    manage({**env, "DATABASE_URL": url}, "migrate", "--noinput", "--verbosity", "0")
    return url


def migrated_database(env: dict[str, str], name: str) -> str:
    """Database `name` on the server of env's DATABASE_URL, created afresh and migrated (a copy
    of the migrated template where `TEMPLATE_VARIABLE` names one). Returns its URL."""
    import psycopg
    from psycopg import sql

    template, base = env.get(TEMPLATE_VARIABLE), env["DATABASE_URL"]
    if not template:
        return _migrate_into(env, name)
    if not _exists(base, template):
        # Built under a name of its own, then renamed: a migration that fails leaves no
        # half-migrated template behind.
        building = f"{template}_{os.getpid()}"
        _migrate_into(env, building)
        rename = sql.SQL("ALTER DATABASE {} RENAME TO {}")
        try:
            with psycopg.connect(database_url(base, "postgres"), autocommit=True) as conn:
                conn.execute(rename.format(sql.Identifier(building), sql.Identifier(template)))
        except psycopg.errors.DuplicateDatabase:  # another process built it meanwhile
            drop_database(base, building)
    drop_database(base, name)
    with psycopg.connect(database_url(base, "postgres"), autocommit=True) as conn:
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}")
        conn.execute(create.format(sql.Identifier(name), sql.Identifier(template)))
    return database_url(base, name)


def fresh_database(
    env: dict[str, str],
    name: str,
    *,
    tools: Path = ROOT / "tools.toml",
    agents: Sequence[str] = (),
) -> tuple[dict[str, str], list[str]]:
    """Database `name` on the server of env's DATABASE_URL, created afresh, migrated, with
    `tools` declared and `agents` created. Returns `env` pointing at it, and the agents' keys
    (createagent prints the key last)."""
    env = {**env, "DATABASE_URL": migrated_database(env, name)}
    manage(env, "loadtools", str(tools))
    keys = [manage(env, "createagent", agent).strip().splitlines()[-1] for agent in agents]
    return env, keys
