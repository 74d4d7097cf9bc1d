"""The web server as `make run` serves it, and as production should: nginx (`config.nginx`)
on the public address, gunicorn's gthread workers behind it on a Unix socket of their own.

gunicorn reads a request, and writes its answer, in the thread that runs it, so clients that
send or read slowly can hold every thread; nginx reads each request whole before gunicorn sees
it and each answer whole before the client does. `gunicorn_argv` alone (the tests that need
several gunicorn processes, the crash test) serves the same application without it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from config.nginx import UPSTREAM_KEEPALIVE
from devstack.embedded import VAR
from devstack.supervisor import Service

WEB_APP = "config.wsgi:application"
_SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes on Linux


def _venv_tool(name: str) -> list[str]:
    """A console script next to this interpreter (the venv's bin/), else `python -m name`."""
    script = Path(sys.executable).parent / name
    return [str(script)] if script.is_file() else [sys.executable, "-m", name]


def gunicorn_argv(
    app: str, bind: str, *, workers: int | str, threads: int | str, options: Sequence[str] = ()
) -> list[str]:
    """gunicorn serving `app` as `make run` does (gthread workers); the crash test and the
    lifecycle benchmark start theirs through here too, so they measure the same server.

    `--preload`: the master loads the application before it binds its socket, and its workers
    are forked from it ready to serve. A server that was killed and started again refuses
    connections while it loads (nginx answers 502 at once, and the client repeats the request),
    instead of accepting them into the socket's backlog for the seconds each worker would take
    to import the application on a busy machine. A change of code takes a restart of the
    master, as every deploy here does; SIGHUP alone would keep the old code.

    `--worker-tmp-dir`: each worker tells the master it is alive by changing its temporary
    file's mode, between every two requests; gunicorn's documentation warns that on a
    disk-backed file system this can block a worker, and advises shared memory, which is used
    where there is one. (Measured here, it changed nothing beyond the noise.)"""
    return [
        *_venv_tool("gunicorn"), app,
        "--preload",
        *_worker_tmp_dir(),
        "--worker-class", "gthread",
        "--workers", str(workers),
        "--threads", str(threads),
        "--bind", bind,
        "--config", "python:config.gunicorn_hooks",
        *options,
    ]  # fmt: skip


def _worker_tmp_dir() -> list[str]:
    shm = Path("/dev/shm")
    return ["--worker-tmp-dir", str(shm)] if shm.is_dir() and os.access(shm, os.W_OK) else []


def gunicorn_has_control_socket() -> bool:
    """gunicorn 27 added a control socket; older ones reject the option."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("gunicorn").split(".")[0]) >= 27
    except (PackageNotFoundError, ValueError):
        return False


def upstream_socket(port: int) -> Path:
    """Where gunicorn listens behind nginx on `port`: under var/, or the temporary
    directory when var/ is too deep for a socket's path."""
    path = VAR / f"web-{port}.sock"
    if len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        path = Path(tempfile.gettempdir()) / f"effect-ledger-{os.getuid()}-web-{port}.sock"
    return path


def front_argv(bind: str, upstream: Path) -> list[str]:
    """nginx on `bind` in front of gunicorn at `upstream`, its own files beside the socket."""
    prefix = upstream.with_name(f"{upstream.stem}-nginx")
    return [
        sys.executable, "-m", "config.nginx", "run",
        "--listen", bind, "--upstream", f"unix:{upstream}", "--prefix", str(prefix),
    ]  # fmt: skip


def web_services(
    host: str,
    port: int,
    *,
    workers: int | str,
    threads: int | str,
    options: Sequence[str] = (),
    upstream: Path | None = None,
) -> list[Service]:
    """gunicorn on a Unix socket, then nginx on host:port passing requests to it (start them
    in this order; stop them in reverse). `options` go to gunicorn."""
    path = upstream or upstream_socket(port)
    extra = ["--keep-alive", str(UPSTREAM_KEEPALIVE), *options]
    if gunicorn_has_control_socket() and "--control-socket" not in options:
        # Its default, ~/.gunicorn/gunicorn.ctl, is shared by every gunicorn of the user.
        extra += ["--control-socket", str(path.with_suffix(".ctl"))]
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return [
        Service(
            "gunicorn",
            gunicorn_argv(WEB_APP, f"unix:{path}", workers=workers, threads=threads, options=extra),
        ),
        Service("nginx", front_argv(bind, path)),
    ]


def upstream_accepts(port: int, upstream: Path | None = None) -> bool:
    """Whether gunicorn behind nginx on `port` accepts connections yet."""
    with (
        contextlib.suppress(OSError),
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock,
    ):
        sock.settimeout(1)
        sock.connect(str(upstream or upstream_socket(port)))
        return True
    return False
