"""The drills' own settings: whatever the caller's environment or `make run` holds.

A drill's processes (the web, the workers, `manage.py` steps, the sandboxes) get secrets
generated for this run, their private servers' URLs, and LEDGER_ENV_FILE pointing at nothing,
so neither `var/run.env` nor a caller's LEDGER_KEYS, DATABASE_URL or LOG_LEVEL reaches them;
their databases are fresh, so no key of another database is needed. What the caller's
environment keeps is what runs programs (PATH, HOME, the locale, …).

The conductor (`python -m devstack.drills`, `make drills`) needs Django's settings to import
the ledger's models, not a database: its settings are the same secrets and URLs that reach
nothing (`conductor_environment`), so a stray query fails at once instead of touching someone
else's database.
"""

from __future__ import annotations

import functools
import os

# Read by the settings (config/settings.py), the stack (devstack/stack.py, devstack/layout.py),
# gunicorn or the sandbox providers: never taken from the caller.
PREFIXES = ("LEDGER_", "DATABASE_", "REDIS_", "EMAIL_", "LOG_", "GUNICORN_", "AXES_", "DJANGO_")
NAMES = frozenset(
    {
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        "CSRF_TRUSTED_ORIGINS",
        "SECURE_COOKIES",
        "Q_WORKERS",
        "HOST",
        "PORT",
        "STACK_DIR",
        "SANDBOX_PAYMENTS_PORT",
        "SANDBOX_MESSAGING_PORT",
        "PROMETHEUS_MULTIPROC_DIR",
        "SANDBOX_WEBHOOK_SECRET",
        "WEB_CONCURRENCY",
        "FORWARDED_ALLOW_IPS",
    }
)
# A unix socket directory that does not exist: connecting fails at once, reaching no server.
NOWHERE_DATABASE_URL = "postgres://faultdrill@/no-database?host=/nonexistent"
NOWHERE_REDIS_URL = "unix:///nonexistent/redis.sock"


def is_callers(name: str) -> bool:
    """Whether a variable of the caller's would change how the ledger or the stack behave."""
    return name in NAMES or name.startswith(PREFIXES)


@functools.cache
def drill_secrets() -> dict[str, str]:
    """SECRET_KEY, LEDGER_KEYS, LEDGER_WEBHOOK_SECRETS, LEDGER_METRICS_TOKEN, new for this run
    (the same for every drill of it)."""
    from devstack.stack import SECRET_NAMES, generate_secret

    return {name: generate_secret(name) for name in SECRET_NAMES}


def drill_environment(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a drill's processes: the caller's without its settings, the drill's
    secrets and servers, no env file, and `extra` (a drill's own settings)."""
    env = {name: value for name, value in os.environ.items() if not is_callers(name)}
    env.update(drill_secrets())
    env.update(
        LEDGER_ENV_FILE=os.devnull,
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


def conductor_environment() -> dict[str, str]:
    """The conductor's own: the drills' secrets, and servers it cannot reach."""
    return drill_environment(NOWHERE_DATABASE_URL, NOWHERE_REDIS_URL)
