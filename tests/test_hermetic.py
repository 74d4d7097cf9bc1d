"""The suite passes whatever the caller's environment holds (tests/hermetic.py): its secrets are
its own, and every variable that changes how the ledger behaves is taken away.

The proof runs a few tests in a pytest of their own under hostile values: other secrets (the
log scanner's test looks for the suite's webhook secret), a log level that silences the request
lines, settings that would refuse to load, a settings module that does not exist, an env file
with other keys.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from devstack.provision import database_name, database_url
from tests.helpers import ROOT
from tests.hermetic import is_scrubbed

PROOF = [
    "tests/test_hermetic.py::test_the_settings_and_the_environment_are_the_suites_own",
    "tests/test_logs.py::test_the_suite_scanner_finds_each_kind_of_secret",
    "tests/test_logs.py::test_an_api_call_logs_one_line_with_its_request_id_agent_effect_and_run",
]


def hostile(tmp_path: Path) -> dict[str, str]:
    env_file = tmp_path / "run.env"
    env_file.write_text("LEDGER_KEYS=8:from-an-env-file-0123456789abcdef\nLEDGER_MAX_CHECKS=1\n")
    return {
        "SECRET_KEY": "another-secret-key-0123456789abcdef",
        "LEDGER_KEYS": "9:another-ledger-key-0123456789abcdef",
        "LEDGER_WEBHOOK_SECRETS": "other:another-webhook-secret-0123456789",
        "LEDGER_ENV_FILE": str(env_file),
        "LEDGER_MAX_WAITERS": "1",
        "LEDGER_METRICS_TOKEN": "a-token-the-suite-never-sends",
        "LEDGER_SETTLE_AFTER": "1s",
        "LOG_FORMAT": "plain",
        "LOG_LEVEL": "CRITICAL",
        "GUNICORN_THREADS": "1",
        "DATABASE_CONNECT_TIMEOUT": "not-a-number",
        "REDIS_SOCKET_TIMEOUT": "0",
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "ALLOWED_HOSTS": "example.invalid",
        "DJANGO_DEBUG": "true",
        "DJANGO_SETTINGS_MODULE": "nowhere.settings",
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics"),
        "SANDBOX_WEBHOOK_SECRET": "another-sandbox-secret",
    }


def test_the_settings_and_the_environment_are_the_suites_own():
    assert settings.SECRET_KEY == "test-secret-key-0123456789abcdef"
    assert settings.LEDGER_KEYS == {1: b"test-ledger-key-0123456789abcdef"}
    assert settings.LEDGER_WEBHOOK_SECRETS == {"sandbox-pay": "test-webhook-secret-0123456789"}
    # The defaults of config/settings.py.
    assert settings.LEDGER_MAX_WAITERS == 2
    assert settings.LEDGER_MAX_CHECKS == 6
    assert settings.LEDGER_METRICS_TOKEN == ""
    assert settings.LOG_FORMAT == "json"
    assert settings.LOGGING["root"]["level"] == "INFO"
    assert not settings.DEBUG
    assert "testserver" in settings.ALLOWED_HOSTS
    assert [name for name in os.environ if is_scrubbed(name)] == []


def test_what_is_scrubbed_and_what_is_kept():
    for name in ("LEDGER_MAX_WAITERS", "LOG_FORMAT", "DATABASE_CONN_MAX_AGE", "EMAIL_HOST",
                 "GUNICORN_CMD_ARGS", "PORT", "DJANGO_DEBUG", "REDIS_SOCKET_TIMEOUT"):  # fmt: skip
        assert is_scrubbed(name), name
    for name in ("DATABASE_URL", "REDIS_URL", "LEDGER_DOCS_SCREENSHOTS", "PATH", "HOME",
                 "LEDGER_KEYS", "DJANGO_SETTINGS_MODULE"):  # fmt: skip
        assert not is_scrubbed(name), name


def test_a_hostile_environment_changes_nothing(tmp_path):
    # A database of its own: pytest-django names its test database after it, and the one of
    # this run is in use.
    base = os.environ["DATABASE_URL"]
    own = database_url(base, f"{database_name(base)}_hermetic")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *PROOF],
        cwd=ROOT,
        env={**os.environ, **hostile(tmp_path), "DATABASE_URL": own},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "6 passed" in done.stdout, done.stdout[-2000:]
