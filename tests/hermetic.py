"""The suite's own environment, whatever the caller's holds.

Loaded with `-p tests.hermetic` (pyproject's `addopts`), so this module runs before
pytest-django imports `config.settings`: settings read the environment once, at import, and a
fixture would come too late. It sets the secrets the tests rely on (`TEST_ENVIRONMENT`) and
removes every other variable that would change how the ledger, gunicorn or the stack behave
(`scrubbed`): a caller's `LEDGER_WEBHOOK_SECRETS`, `LOG_FORMAT=plain` or `GUNICORN_THREADS`
changes nothing. Subprocesses the tests start inherit the result.

Kept: `DATABASE_URL` and `REDIS_URL`, which point the suite at its servers (`.ci/run` and
`make test` set them), and the variables that steer the tests themselves (`KEPT`).
`tests/test_hermetic.py` runs a few tests under hostile values to show it.
"""

from __future__ import annotations

import os

import pytest

from devstack.drills import environment as drill_environment

# The test-only secrets (`make run` generates real ones under var/). The Makefile's TEST_ENV
# gives `make crashtest` and `make bench` the same values (`make drills` generates its own).
TEST_ENVIRONMENT = {
    "SECRET_KEY": "test-secret-key-0123456789abcdef",
    "LEDGER_KEYS": "1:test-ledger-key-0123456789abcdef",
    "LEDGER_WEBHOOK_SECRETS": "sandbox-pay:test-webhook-secret-0123456789",
    # Not var/run.env, which a `make run` in another shell writes (settings read it as
    # defaults).
    "LEDGER_ENV_FILE": "/nonexistent",
    "DJANGO_SETTINGS_MODULE": "config.settings",
}
# Where the servers are, and what the tests themselves read (the docs' screenshots, the crash
# test's Redis database).
KEPT = frozenset({"DATABASE_URL", "REDIS_URL", "LEDGER_DOCS_SCREENSHOTS", "CRASHTEST_REDIS_DB"})
# Read by the settings, the stack, gunicorn or the sandbox providers: the same variables the
# drills keep from the caller (SECRET_KEY among them, set above for the tests).
PREFIXES, NAMES = drill_environment.PREFIXES, drill_environment.NAMES


def is_scrubbed(name: str) -> bool:
    """Whether a variable of the caller's is taken away before the tests run."""
    if name in KEPT or name in TEST_ENVIRONMENT:
        return False
    return name in NAMES or name.startswith(PREFIXES)


def make_hermetic(environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """Scrub `environ` and set the test values in it; returns the names taken away."""
    removed = sorted(name for name in environ if is_scrubbed(name))
    for name in removed:
        del environ[name]
    environ.update(TEST_ENVIRONMENT)
    return removed


REMOVED = make_hermetic(os.environ)


def pytest_report_header(config: pytest.Config) -> str:
    names = ", ".join(REMOVED) if REMOVED else "nothing"
    return f"hermetic environment (tests/hermetic.py): test secrets set; removed {names}"
