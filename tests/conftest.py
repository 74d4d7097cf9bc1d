"""The suite runs on real PostgreSQL and Redis (DATABASE_URL / REDIS_URL) in an environment of
its own (tests/hermetic.py, loaded first with `-p`). Its fixtures are plugins grouped by domain
(tests/fixtures/); what test modules import is in tests/helpers.py and tests/factories.py."""

import pytest

pytest_plugins = [
    "tests.fixtures.isolation",
    # After a transactional test, the rows it left deleted, not every table truncated.
    "tests.fixtures.flush",
    "tests.fixtures.effects",
    "tests.fixtures.agents",
    "tests.fixtures.people",
    "tests.fixtures.queues",
    "tests.fixtures.providers",
    # The web stack as `make run` serves it (nginx in front of gunicorn), for black-box tests.
    "tests.fixtures.served",
    # A real OpenID Connect provider in its own process, for single sign-on.
    "tests.fixtures.idp",
    # Every log line of the suite is scanned for keys, passwords and card numbers.
    "tests.logscan",
]


def pytest_addoption(parser) -> None:
    # The frameworks' crash matrix at size (`make crashtest-frameworks`); the suite's own size
    # otherwise, whatever the caller's environment says.
    group = parser.getgroup("crash matrix")
    group.addoption("--crash-matrix", choices=("suite", "full"), default="suite")
    # Payments per corner; without it, each matrix's own suite size.
    group.addoption("--crash-payments", type=int, default=None)
    group.addoption("--crash-kill-p", default="0.15")
    # The control: calls known by the model's call id, as before ADR 0018 (it must fail).
    group.addoption("--crash-identity", choices=("position", "call_id"), default="position")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (`make test`): whole files, tests/browser/ as one, longest first
    (tests/scheduling.py)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.scheduling import LongestFirst

    return LongestFirst(config, log)
