"""DATABASE_URL with several hosts, as libpq takes them (config.database): the lists reach
psycopg, target_session_attrs defaults to read-write, single-host URLs read as before, and a
URL that cannot be used stops the process with what is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dj_database_url
import psycopg
import pytest
from django.core.exceptions import ImproperlyConfigured

from config.database import database_settings

ROOT = Path(__file__).resolve().parent.parent


def _parse(url: str) -> dict:
    return database_settings(url, conn_max_age=600, conn_health_checks=False)


def test_hosts_in_the_authority_become_libpq_lists_with_read_write_by_default():
    config = _parse("postgres://ledger:s%40cret@db1:5432,db2:5433/ledger?sslmode=require")
    assert config["HOST"] == "db1,db2"
    assert config["PORT"] == "5432,5433"
    assert (config["NAME"], config["USER"], config["PASSWORD"]) == ("ledger", "ledger", "s@cret")
    assert config["OPTIONS"] == {"sslmode": "require", "target_session_attrs": "read-write"}
    assert config["CONN_MAX_AGE"] == 600
    assert config["ENGINE"] == "django.db.backends.postgresql"


def test_hosts_in_the_query_ipv6_and_default_ports():
    config = _parse(
        "postgresql://ledger@/ledger?host=db1,db2&port=5432&target_session_attrs=primary"
    )
    assert (config["HOST"], config["PORT"]) == ("db1,db2", "5432,5432")
    assert config["OPTIONS"]["target_session_attrs"] == "primary"
    config = _parse("postgres://ledger@[::1]:5432,db2/ledger")
    assert (config["HOST"], config["PORT"]) == ("::1,db2", "5432,")
    config = _parse("postgres://ledger@db1,db2/ledger")
    assert (config["HOST"], config["PORT"]) == ("db1,db2", "")


def test_psycopg_takes_the_lists_as_libpq_does():
    config = _parse("postgres://ledger@db1:5432,db2:5433/ledger")
    info = psycopg.conninfo.make_conninfo(
        dbname=config["NAME"], host=config["HOST"], port=config["PORT"], **config["OPTIONS"]
    )
    parsed = psycopg.conninfo.conninfo_to_dict(info)
    assert (parsed["host"], parsed["port"]) == ("db1,db2", "5432,5433")
    assert parsed["target_session_attrs"] == "read-write"


@pytest.mark.parametrize(
    "url",
    [
        "postgres://ledger:pw@db.example:5433/ledger?sslmode=require",
        "postgres://ledger@/ledger?host=/run/postgresql",
        "postgres://ledger@db1/ledger?target_session_attrs=read-write",
        "postgres://postgres@127.0.0.1:5432/ledger",
    ],
)
def test_a_single_host_url_reads_exactly_as_dj_database_url_reads_it(url):
    expected = dj_database_url.parse(url, conn_max_age=600, conn_health_checks=False)
    assert _parse(url) == expected


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("postgres://ledger@db1:5432,db2:x/ledger", "'x' is not a port number"),
        ("postgres://ledger@db1,db2:70000/ledger", "'70000' is not a port number"),
        ("postgres://ledger@db1,db2,db3/ledger?port=1,2", "3 hosts but 2 ports"),
        ("postgres://ledger@db1,,db2/ledger", "a host in the list is empty"),
        ("postgres://ledger@db1,db2/", "names no database"),
        ("postgres://ledger@db1,db2/ledger?target_session_attrs=nope", "not one of libpq's"),
        ("postgres://ledger@db1,db2/ledger?target_session_attrs=any", "could connect the ledger"),
        ("postgres://ledger@db1,db2/ledger?target_session_attrs=prefer-standby", "to a standby"),
        ("postgres://ledger@db1,db2/ledger?host=db3,db4", "either in the URL or as host="),
        ("mysql://ledger@db1,db2/ledger", "for PostgreSQL only"),
        ("postgres://ledger@db1:abc/ledger", "cannot be read"),
        ("mysql://ledger@db1/ledger", "must point at PostgreSQL"),
    ],
)
def test_a_url_that_cannot_be_used_is_a_configuration_error(url, says):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL") as caught:
        _parse(url)
    assert says in str(caught.value)


def test_the_password_is_never_in_the_message():
    with pytest.raises(ImproperlyConfigured) as caught:
        _parse("postgres://ledger:hunter2-secret@db1:5432,db2:x/ledger")
    assert "hunter2" not in str(caught.value)


def test_a_process_started_with_a_bad_url_says_what_is_wrong_without_a_traceback():
    env = {**os.environ, "DATABASE_URL": "postgres://ledger@db1:5432,db2:543x/ledger"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "Configuration error: DATABASE_URL: '543x' is not a port number." in done.stderr
    assert "Traceback" not in done.stderr
