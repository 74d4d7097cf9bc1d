"""LEDGER_KEYS against the database's memory of them: a ledger started with other keys than the
ones a (restored) database was used with refuses to start, and says why.

The database here stands for a restored one: it holds the fingerprints of the keys it was used
with, and the processes are started for real (`manage.py check`, which every command that
starts a worker runs first, and gunicorn) with the right and with the wrong keys."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from django.db import connection

from devstack.embedded import free_port
from devstack.provision import database_url
from devstack.web import gunicorn_argv
from ledger.models import KeyFingerprint
from ledger.restore import keyring
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

RIGHT = {1: b"test-ledger-key-0123456789abcdef"}
WRONG = "1:another-ledger-key-0123456789abcdef"


def test_the_first_start_records_the_keys_and_later_starts_compare_them():
    assert keyring.problems(RIGHT) == []
    assert KeyFingerprint.objects.get(version=1).fingerprint == keyring.fingerprint(RIGHT[1])
    assert keyring.problems(RIGHT) == []
    # A new version is recorded; the old one must stay (idempotency keys derive from it).
    rotated = {**RIGHT, 2: b"second-ledger-key-0123456789abcdef"}
    assert keyring.problems(rotated) == []
    assert set(KeyFingerprint.objects.values_list("version", flat=True)) == {1, 2}
    other = keyring.problems({1: b"another-ledger-key-0123456789abcdef", 2: rotated[2]})
    assert other == [
        "LEDGER_KEYS version 1 is not the key this database was used with (its fingerprint differs)"
    ]
    assert keyring.problems({2: rotated[2]}) == [
        "LEDGER_KEYS lacks version 1, from which this database's idempotency keys derive"
    ]
    # Nothing is recorded from a ring that was refused.
    assert KeyFingerprint.objects.count() == 2


def _env(keys: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url(os.environ["DATABASE_URL"], connection.settings_dict["NAME"]),
        "LEDGER_KEYS": keys,
    }


def test_a_command_started_with_other_keys_refuses_and_says_why():
    keyring.problems(RIGHT)
    right = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=_env("1:test-ledger-key-0123456789abcdef"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert right.returncode == 0, right.stderr
    wrong = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=_env(WRONG),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert wrong.returncode != 0
    assert "ledger.E001" in wrong.stderr
    assert "LEDGER_KEYS version 1 is not the key this database was used with" in wrong.stderr


def test_the_web_server_started_with_other_keys_stops_instead_of_serving(tmp_path):
    keyring.problems(RIGHT)
    log = tmp_path / "gunicorn.log"
    argv = gunicorn_argv(
        "config.wsgi:application", f"127.0.0.1:{free_port()}", workers=1, threads=1
    )
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=_env(WRONG), stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is not None, "gunicorn kept running with the wrong keys"
        assert proc.returncode != 0
        text = log.read_text()
        assert "refusing to start" in text and "not the key this database was used with" in text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
