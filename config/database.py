"""`DATABASE_URL` into Django's database settings, with several hosts as libpq takes them.

A single-host URL is read by dj-database-url, exactly as before. dj-database-url cannot read a
libpq multi-host URL (`postgres://user@h1:5432,h2:5433/db`, or `host=h1,h2` in the query), so
those are read here: the hosts and ports go to psycopg as libpq's comma-separated lists, and
`target_session_attrs` (libpq's own parameter) says which of them to use. With several hosts it
is `read-write` unless the URL says `primary`: every ledger process writes, and a connection
that landed on a standby would stay open and refuse every write until the process restarted.

Each new connection tries the hosts in order and keeps the first that accepts writes, so a
process reaches whichever host is primary by reconnecting
(docs/adr/0011-several-database-hosts-reconnect-to-the-primary.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

SCHEMES = ("postgres", "postgresql", "pgsql")
ENGINE = "django.db.backends.postgresql"
# The values of libpq's target_session_attrs that a ledger process can work with: it writes.
WRITABLE = ("read-write", "primary")
TARGET_SESSION_ATTRS = ("any", "read-write", "read-only", "primary", "standby", "prefer-standby")


def _problem(message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"DATABASE_URL: {message}")


def is_multi_host(url: str) -> bool:
    """Whether `url` names several hosts (in its authority, or in a `host`/`port` query list)."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2]
    query = dict(parse_qsl(parts.query))
    return "," in hosts or "," in query.get("host", "") or "," in query.get("port", "")


def _split_authority(hosts: str) -> tuple[list[str], list[str]]:
    """`h1:5432,[::1]:5433,h3` into hosts and ports (an empty port: libpq's default)."""
    names, ports = [], []
    for entry in hosts.split(","):
        if entry.startswith("["):
            name, bracket, rest = entry[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise _problem(f"cannot read the host {entry!r}.")
            port = rest[1:]
        else:
            name, _, port = entry.partition(":")
        if not name:
            raise _problem("a host in the list is empty.")
        names.append(unquote(name))
        ports.append(port)
    return names, ports


def _check_ports(hosts: list[str], ports: list[str]) -> list[str]:
    if len(ports) == 1 and len(hosts) > 1:
        ports = ports * len(hosts)
    if len(ports) != len(hosts):
        raise _problem(
            f"{len(hosts)} hosts but {len(ports)} ports: give one port for all, or one per host."
        )
    for port in ports:
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise _problem(f"{port!r} is not a port number.")
    return ports


def _target_session_attrs(value: str | None) -> str:
    if value is None:
        return "read-write"
    if value not in TARGET_SESSION_ATTRS:
        raise _problem(
            f"target_session_attrs={value!r} is not one of libpq's "
            f"({', '.join(TARGET_SESSION_ATTRS)})."
        )
    if value not in WRITABLE:
        raise _problem(
            f"target_session_attrs={value!r} could connect the ledger to a standby, where every "
            f"write fails until the process restarts; with several hosts use read-write or "
            f"primary."
        )
    return value


def parse_multi_host(url: str) -> dict[str, Any]:
    """Django's settings for a multi-host URL: HOST and PORT as libpq's lists, the query's
    other parameters (sslmode, connect_timeout, ...) in OPTIONS, as dj-database-url puts them."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise _problem(f"several hosts are for PostgreSQL only, not {parts.scheme!r}://.")
    userinfo, at, authority = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":") if at else ("", "", "")
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    hosts_param, ports_param = options.pop("host", None), options.pop("port", None)
    if hosts_param is not None and authority:
        raise _problem("give the hosts either in the URL or as host= in the query, not both.")
    hosts, ports = _split_authority(hosts_param if hosts_param is not None else authority)
    if ports_param is not None:
        if any(ports):
            raise _problem("give the ports either with the hosts or as port=, not both.")
        ports = ports_param.split(",")
    ports = _check_ports(hosts, ports)
    name = unquote(parts.path.lstrip("/"))
    if not name:
        raise _problem("the URL names no database (…/dbname).")
    options["target_session_attrs"] = _target_session_attrs(options.get("target_session_attrs"))
    return {
        "ENGINE": ENGINE,
        "NAME": name,
        "USER": unquote(user),
        "PASSWORD": unquote(password),
        "HOST": ",".join(hosts),
        # One entry per host; an empty one is libpq's default port.
        "PORT": ",".join(ports) if any(ports) else "",
        "OPTIONS": options,
    }


def database_settings(url: str, *, conn_max_age: int, conn_health_checks: bool) -> dict[str, Any]:
    """Django's `DATABASES["default"]` for `url`; a URL that cannot be used stops the process
    with ImproperlyConfigured, naming what is wrong (never the password)."""
    if is_multi_host(url):
        config = parse_multi_host(url)
        config.update(
            CONN_MAX_AGE=conn_max_age,
            CONN_HEALTH_CHECKS=conn_health_checks,
            DISABLE_SERVER_SIDE_CURSORS=False,
        )
        return config
    try:
        config = dj_database_url.parse(
            url, conn_max_age=conn_max_age, conn_health_checks=conn_health_checks
        )
    except ValueError as exc:  # dj-database-url.ParseError is one
        raise _problem(f"cannot be read ({exc}).") from None
    if not config.get("ENGINE", "").endswith("postgresql"):
        raise ImproperlyConfigured("DATABASE_URL must point at PostgreSQL (postgres://...).")
    return config
