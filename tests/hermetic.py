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

Under pytest-xdist (`make test` runs three workers) each worker is given places of its own
(`for_worker`): worker N>0 appends `_gwN` to the database name of `DATABASE_URL`, so its test
database and every database a test derives from that name (the crash test's, DBOS's, the
hermetic proof's) are its own, and it takes Redis databases of its own for the cache, the rq
queue (`RQ_REDIS_DB`) and the crash test (`CRASHTEST_REDIS_DB`). Worker 0 keeps the values a
run without workers has. Ports are free ports chosen per process already.

The fresh databases the tests' processes create (the crash test's, a drill's) are copies of
one migrated template per worker (`DEVSTACK_DATABASE_TEMPLATE`, `migrated_template`), migrated
by the first that needs it and dropped when the session starts and ends.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest

from devstack.drills import environment as drill_environment
from devstack.provision import TEMPLATE_VARIABLE, drop_database

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


# The Redis databases a run without workers uses besides REDIS_URL's own: the rq queue's
# (tests/fixtures/queues.py) and the crash test's (tests/crashruns.py). Worker N takes the
# pair two below worker N-1's, and REDIS_URL's database plus N: up to MAX_WORKERS workers on the
# 16 databases of a default Redis, with REDIS_URL's database below 4.
RQ_BASE_DB, CRASHTEST_BASE_DB = 13, 14
MAX_WORKERS = 4


def worker_number(environ: dict[str, str] | os._Environ[str]) -> int:
    """This process's pytest-xdist worker number (`gw1` → 1), 0 without workers."""
    worker = environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


def _redis_db(url: str, offset: int) -> str:
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0) + offset
    return urlunsplit(parts._replace(path=f"/{db}"))


def for_worker(environ: dict[str, str] | os._Environ[str], number: int) -> int:
    """Point `environ` at worker `number`'s own databases; returns its rq queue's Redis
    database. The worker variables are taken away: a pytest a test starts is no worker."""
    environ.pop("PYTEST_XDIST_WORKER", None)
    environ.pop("PYTEST_XDIST_WORKER_COUNT", None)
    if number >= MAX_WORKERS:
        raise pytest.UsageError(f"at most {MAX_WORKERS} workers: each needs Redis databases")
    environ.setdefault("CRASHTEST_REDIS_DB", str(CRASHTEST_BASE_DB - 2 * number))
    if number == 0:
        return RQ_BASE_DB
    if environ.get("DATABASE_URL"):
        url = urlsplit(environ["DATABASE_URL"])
        environ["DATABASE_URL"] = urlunsplit(url._replace(path=f"{url.path}_gw{number}"))
    if environ.get("REDIS_URL"):
        environ["REDIS_URL"] = _redis_db(environ["REDIS_URL"], number)
    return RQ_BASE_DB - 2 * number


def migrated_template(environ: dict[str, str] | os._Environ[str]) -> None:
    """Name the migrated template the fresh databases of this process and its children are
    copied from (`devstack.provision.migrated_database`): `<database>_migrated`, the worker's
    own like its other databases. None without DATABASE_URL: no caller's value stays."""
    environ.pop(TEMPLATE_VARIABLE, None)
    if environ.get("DATABASE_URL"):
        name = urlsplit(environ["DATABASE_URL"]).path.strip("/")
        environ[TEMPLATE_VARIABLE] = f"{name}_migrated"


REMOVED = make_hermetic(os.environ)
WORKER = worker_number(os.environ)
RQ_REDIS_DB = for_worker(os.environ, WORKER)
migrated_template(os.environ)


def _drop_template() -> None:
    # Built from the migrations of this run when first needed; one left by an earlier run may
    # hold other migrations.
    if os.environ.get(TEMPLATE_VARIABLE):
        drop_database(os.environ["DATABASE_URL"], os.environ[TEMPLATE_VARIABLE])


def pytest_sessionstart(session: pytest.Session) -> None:
    _drop_template()


def pytest_sessionfinish(session: pytest.Session) -> None:
    _drop_template()


def pytest_report_header(config: pytest.Config) -> str:
    names = ", ".join(REMOVED) if REMOVED else "nothing"
    return f"hermetic environment (tests/hermetic.py): test secrets set; removed {names}"
