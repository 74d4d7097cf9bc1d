"""Run the Effect Ledger with everything it needs, on a bare machine.

    python -m config.stack run              # `make run`: the whole service, until Ctrl-C
    python -m config.stack exec -- CMD ...  # `make test`, `make bench`: CMD with servers up

Both commands first make sure PostgreSQL and Redis are reachable: when `DATABASE_URL` or
`REDIS_URL` is unset (or empty) an embedded server is started for it (see `config.embedded`)
and the variable is set for the children; when it is set, it is used as is and nothing starts.
Servers started here are stopped when the stack exits, however it exits (Ctrl-C, SIGTERM, an
error, a child dying); if the stack itself is SIGKILLed, its children get SIGTERM from the
kernel (Linux) and the next run cleans up what is left.

`exec` runs CMD in the foreground (same terminal and process group, inherited stdio), then stops
the servers and exits with CMD's exit code.

`run` additionally:
  * generates SECRET_KEY, LEDGER_KEYS, LEDGER_WEBHOOK_SECRETS and LEDGER_METRICS_TOKEN once into
    `var/secrets.env` (0600) and reuses them, because idempotency keys are HMACs under
    LEDGER_KEYS and must stay stable across restarts; values set in the environment win;
  * writes `var/run.env` with the URLs and secrets of this run, which `config/settings.py` reads
    as defaults, so `python manage.py ...` works from a second shell while the stack runs;
  * migrates, collects static files, loads `tools.toml`, creates the `demo` agent and the
    `operator` admin if missing (their credentials are printed only when created);
  * starts the web server (gunicorn behind the buffering front door on HOST:PORT, see
    `config.web`), an rq worker and the django-q cluster (plus `sandbox_services()`), and
    supervises them (`config.supervisor`): one that dies is started again; one that dies more
    than five times in a minute stops the stack, which then exits non-zero.

Environment read here: DATABASE_URL, REDIS_URL, HOST (default 127.0.0.1), PORT (default 8000),
GUNICORN_WORKERS (default 2), GUNICORN_THREADS (default 4), and the secrets above. Every child
gets PROMETHEUS_MULTIPROC_DIR=var/prometheus, emptied at start, so that /metrics adds up the
counters of all gunicorn workers, the rq worker and the django-q cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit, urlunsplit

from config.embedded import ROOT, VAR, EmbeddedServers, say, spawn, stop_processes
from config.envfile import read_env_file, write_env_file
from config.supervisor import ChildDied, Service, Supervisor
from config.web import gunicorn_argv as gunicorn_argv  # the tests and crash test use it from here
from config.web import upstream_accepts, web_services
from reconcilers.sandbox.launch import provider_argv

SECRETS_FILE = VAR / "secrets.env"
RUN_ENV_FILE = VAR / "run.env"
SECRET_NAMES = ("SECRET_KEY", "LEDGER_KEYS", "LEDGER_WEBHOOK_SECRETS", "LEDGER_METRICS_TOKEN")
RUN_ENV_NAMES = ("DATABASE_URL", "REDIS_URL", *SECRET_NAMES)
DEMO_AGENT = "demo"
DEMO_OPERATOR = "operator"
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL for each child
STARTUP_TIMEOUT = 60.0  # seconds gunicorn may take to accept connections


# --- Signals ---------------------------------------------------------------------------------


class Shutdown(Exception):
    """Raised out of whatever the stack is doing when SIGINT, SIGTERM or SIGHUP arrives."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGate:
    """Turns stop signals into a `Shutdown` exception, but only where that is safe.

    Inside `deferred()` a signal is remembered and raised on leaving the block, so a server
    that has just started is always registered for stopping first. After `quiet()` (cleanup
    has begun) signals are only remembered: a second Ctrl-C must not abort the cleanup, and the
    SIGKILL after STOP_TIMEOUT bounds how long it takes. In `exec` mode, `forward_to()` makes
    the gate pass SIGTERM/SIGHUP on to the foreground child instead.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._depth = 0
        self._quiet = False
        self._child: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
        if self._child is not None:
            # The child shares our terminal: Ctrl-C has reached it already, and sending SIGINT
            # again would interrupt its own cleanup (pytest's teardown, say). Other stop
            # signals were sent to us alone, so pass them on.
            if signum != signal.SIGINT and self._child.poll() is None:
                self._child.send_signal(signum)
            return
        if self._depth or self._quiet:
            return
        self._quiet = True
        raise Shutdown(signum)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        if not self._depth and self.received is not None and not self._quiet:
            self._quiet = True
            raise Shutdown(self.received)

    def forward_to(self, child: subprocess.Popen[bytes] | None) -> None:
        self._child = child

    def quiet(self) -> None:
        self._quiet = True
        self._child = None


def _signal_exit_code(signum: int) -> int:
    return 128 + signum  # the shell's convention for "killed by signal N"


# --- Secrets -------------------------------------------------------------------------------


def _generate_secret(name: str) -> str:
    if name == "SECRET_KEY":
        return secrets.token_urlsafe(48)
    if name == "LEDGER_KEYS":
        return f"1:{secrets.token_urlsafe(32)}"  # keyring version 1; rotate by adding 2:...
    if name == "LEDGER_WEBHOOK_SECRETS":
        return f"sandbox-pay:{secrets.token_urlsafe(32)}"
    if name == "LEDGER_METRICS_TOKEN":
        return secrets.token_urlsafe(32)
    raise ValueError(name)


def load_secrets(path: Path = SECRETS_FILE) -> dict[str, str]:
    """The stored secrets, generating (and storing) any that are missing."""
    stored = read_env_file(path)
    missing = [name for name in SECRET_NAMES if not stored.get(name)]
    if missing:
        stored.update({name: _generate_secret(name) for name in missing})
        write_env_file(
            path,
            {name: stored[name] for name in SECRET_NAMES},
            "Generated by `make run`. Keep stable: idempotency keys are HMACs under LEDGER_KEYS.",
        )
        say(f"Generated {', '.join(missing)} into {path.relative_to(ROOT)}.")
    else:
        path.chmod(0o600)
    return stored


# --- Child processes -------------------------------------------------------------------------


def manage_argv(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), *args]


class ManageFailed(RuntimeError):
    def __init__(self, args: tuple[str, ...], returncode: int, output: str) -> None:
        super().__init__(
            f"manage.py {' '.join(args)} failed with exit code {returncode}"
            + (f":\n{output}" if output else ".")
        )
        self.returncode = returncode


def manage(env: dict[str, str], *args: str, stdin: str | None = None, capture: bool = True) -> str:
    """Run a management command to the end in a process of its own and return its stdout.

    `capture=False` lets its output through to the terminal (and returns ""): for the long
    steps of `make run`, whose progress a person watches. A failure raises `ManageFailed`
    with what the command printed, so that the caller's message says why.
    """
    done = subprocess.run(
        manage_argv(*args),
        cwd=ROOT,
        env=env,
        input=stdin,
        capture_output=capture,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ManageFailed(args, done.returncode, f"{done.stdout or ''}{done.stderr or ''}")
    return done.stdout or ""


SANDBOX_PAYMENTS_PORT = 8101  # tools.toml points charge_card and refund_card here
SANDBOX_MESSAGING_PORT = 8102


def sandbox_services(host: str, port: int) -> list[Service]:
    """The sandbox providers the demo tools call: card payments (keys, lookup, signed webhooks
    back to this ledger) and messaging (no keys, no lookup). The webhook secret reaches the
    payments sandbox through LEDGER_WEBHOOK_SECRETS in its environment, not its argv."""
    webhook_url = f"http://{_bracket(host)}:{port}/api/v1/webhooks/sandbox-pay"
    return [
        Service(
            "sandbox-payments",
            provider_argv("payments", SANDBOX_PAYMENTS_PORT, "--webhook-url", webhook_url),
        ),
        Service("sandbox-messaging", provider_argv("messaging", SANDBOX_MESSAGING_PORT)),
    ]


def app_services(host: str, port: int) -> list[Service]:
    """Everything `run` keeps running, in start order (it stops them in reverse)."""
    web = web_services(
        host,
        port,
        workers=os.environ.get("GUNICORN_WORKERS", "2"),
        threads=os.environ.get("GUNICORN_THREADS", "4"),
    )
    return [
        *sandbox_services(host, port),
        *web,  # gunicorn, then the front door on host:port (config.web)
        # Non-forking: a wake-up job is a few queries and one provider call, so forking per
        # job would cost more than the job.
        Service(
            "rqworker",
            manage_argv(
                "rqworker",
                "default",
                "--with-scheduler",
                "--worker-class",
                "reconcilers.worker.LedgerWorker",
            ),
        ),
        Service("qcluster", manage_argv("qcluster")),
    ]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, as the kernel picks one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _describe(cmd: object) -> str:
    """`manage.py migrate --noinput` rather than two absolute paths and all."""
    argv = [str(arg) for arg in cmd] if isinstance(cmd, list | tuple) else [str(cmd)]
    if argv and argv[0] == sys.executable:
        argv = argv[1:]
    if argv:
        argv[0] = Path(argv[0]).name
    return " ".join(argv)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Same option gunicorn sets, so a socket in TIME_WAIT does not count as "in use".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _check_children(supervisor: Supervisor, servers: EmbeddedServers) -> None:
    supervisor.check()
    dead = servers.dead()
    if dead:
        raise ChildDied(f"the embedded {dead}", None)


def _wait_for_http(
    host: str,
    port: int,
    supervisor: Supervisor,
    servers: EmbeddedServers,
) -> None:
    connect_host = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        _check_children(supervisor, servers)
        with contextlib.suppress(OSError), socket.create_connection((connect_host, port), 1):
            if upstream_accepts(port):  # gunicorn, behind the front door
                return
        time.sleep(0.2)
    raise RuntimeError(
        f"The web server did not accept connections on port {port} within {STARTUP_TIMEOUT:.0f} s."
    )


# --- One-off setup ---------------------------------------------------------------------------


def fresh_metrics_dir(path: Path = VAR / "prometheus") -> Path:
    """An empty directory for the counters of every process of this run
    (ledger.observability.metrics):
    files a previous run left would otherwise be added to this run's counts."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


_EXISTING = (
    "import json; from django.contrib.auth.models import User; from ledger.models import Agent; "
    f"print(json.dumps([Agent.objects.filter(name={DEMO_AGENT!r}).exists(), "
    f"User.objects.filter(username={DEMO_OPERATOR!r}).exists()]))"
)


def prepare(env: dict[str, str]) -> None:
    """Bring the database up to date and make sure there is someone to sign in as."""
    for args in (
        ("migrate", "--noinput"),
        ("collectstatic", "--noinput"),
        ("loadtools", str(ROOT / "tools.toml")),
    ):
        say(f"manage.py {' '.join(args)}")
        manage(env, *args, capture=False)

    # One Django start-up answers both questions; the last stdout line is the answer.
    lines = manage(env, "shell", "-c", _EXISTING).strip().splitlines()
    agent_exists, operator_exists = json.loads(lines[-1])

    if not agent_exists:
        output = manage(env, "createagent", DEMO_AGENT, "--label", "created by make run")
        words = output.split()
        key = next((word for word in words if word.startswith("elk_")), words[-1])
        print(f"\nDemo agent key (shown once): {key}\n", flush=True)
    if not operator_exists:
        password = secrets.token_urlsafe(18)
        # createoperator reads the password from stdin when stdin is not a terminal.
        manage(env, "createoperator", DEMO_OPERATOR, "--role", "admin", stdin=password)
        print(f"\nDemo operator: {DEMO_OPERATOR} / {password} (shown once)\n", flush=True)


# --- Databases of their own (the benchmarks, the crash test) --------------------------------


def database_url(url: str, name: str) -> str:
    """`url` pointing at database `name` instead (user, host, port and query kept)."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def database_name(url: str) -> str:
    name = urlsplit(url).path.lstrip("/")
    if not name:
        raise SystemExit("DATABASE_URL names no database")
    return name


def drop_database(base_url: str, name: str) -> None:
    """Drop database `name` on the server of `base_url`, closing whatever is connected to it."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def recreate_database(base_url: str, name: str) -> str:
    """Database `name`, empty, on the server of `base_url` (dropped first if it exists).
    Returns its URL."""
    import psycopg
    from psycopg import sql

    drop_database(base_url, name)
    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return database_url(base_url, name)


def fresh_database(
    env: dict[str, str],
    name: str,
    *,
    tools: Path = ROOT / "tools.toml",
    agents: Sequence[str] = (),
) -> tuple[dict[str, str], list[str]]:
    """Database `name` on the server of env's DATABASE_URL, created afresh, migrated, with
    `tools` declared and `agents` created. Returns `env` pointing at it, and the agents' keys
    (createagent prints the key last)."""
    env = {**env, "DATABASE_URL": recreate_database(env["DATABASE_URL"], name)}
    manage(env, "migrate", "--noinput", "--verbosity", "0")
    manage(env, "loadtools", str(tools))
    keys = [manage(env, "createagent", agent).strip().splitlines()[-1] for agent in agents]
    return env, keys


# --- Commands --------------------------------------------------------------------------------


def run() -> int:
    host = os.environ.get("HOST") or "127.0.0.1"
    try:
        port = int(os.environ.get("PORT") or "8000")
    except ValueError:
        say(f"PORT must be a number, got {os.environ['PORT']!r}.")
        return 2
    if not _port_free(host, port):
        say(f"Port {port} on {host} is in use; stop what holds it or set PORT.")
        return 1

    gate = SignalGate()
    gate.install()
    servers = EmbeddedServers()
    supervisor: Supervisor | None = None
    try:
        env = dict(os.environ)
        for name, value in load_secrets().items():
            if not env.get(name):
                env[name] = value
        servers.start(env, guard=gate.deferred)
        write_env_file(
            RUN_ENV_FILE,
            {name: env[name] for name in RUN_ENV_NAMES},
            "Written by `make run` for `manage.py` in another shell; the URLs only work while "
            "it runs.",
        )
        env.setdefault("PYTHONUNBUFFERED", "1")  # child logs appear as they happen
        env["PROMETHEUS_MULTIPROC_DIR"] = str(fresh_metrics_dir())

        prepare(env)

        supervisor = Supervisor(env, ROOT)
        for service in app_services(host, port):
            with gate.deferred():  # started means registered for stopping
                say(f"starting {service.name}")
                supervisor.start(service)
        _wait_for_http(host, port, supervisor, servers)
        base = f"http://{_bracket(host)}:{port}"
        print(
            f"\nEffect Ledger is running at {base}/ — API docs: {base}/api/v1/docs\n"
            "Press Ctrl-C to stop.\n",
            flush=True,
        )

        while True:  # supervise until a signal (Shutdown) or repeated deaths (ChildDied)
            _check_children(supervisor, servers)
            time.sleep(0.5)
    except Shutdown as stop:
        say(f"{stop}: stopping.")
        return 0
    except ChildDied as death:
        say(f"{death}; stopping the others.")
        return 1
    except subprocess.CalledProcessError as exc:
        say(f"{_describe(exc.cmd)} failed with exit code {exc.returncode}.")
        return 1
    except RuntimeError as exc:
        say(str(exc))
        return 1
    finally:
        gate.quiet()
        if supervisor is not None:
            stop_processes(reversed(supervisor.children), timeout=STOP_TIMEOUT)
        servers.close()
        say("stopped.")


def exec_command(cmd: list[str]) -> int:
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        say("exec needs a command: python -m config.stack exec -- CMD [ARGS...]")
        return 2

    gate = SignalGate()
    gate.install()
    servers = EmbeddedServers()
    child: subprocess.Popen[bytes] | None = None
    try:
        env = dict(os.environ)
        servers.start(env, guard=gate.deferred)
        with gate.deferred():
            try:
                # Same process group as the stack: CMD keeps the terminal (pytest --pdb works)
                # and gets Ctrl-C directly.
                child = spawn(cmd, env=env, own_group=False)
            except OSError as exc:
                say(f"cannot run {cmd[0]}: {exc}")
                return 127
            gate.forward_to(child)
        returncode = child.wait()
        return returncode if returncode >= 0 else _signal_exit_code(-returncode)
    except Shutdown as stop:
        say(f"{stop}: stopping.")
        return _signal_exit_code(stop.signum)
    except subprocess.CalledProcessError as exc:
        say(f"could not start the servers: {_describe(exc.cmd)} failed ({exc.returncode}).")
        return 1
    except RuntimeError as exc:
        say(f"could not start the servers: {exc}")
        return 1
    finally:
        gate.quiet()
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                child.kill()
        servers.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m config.stack",
        description="Run the Effect Ledger, starting embedded PostgreSQL/Redis when "
        "DATABASE_URL/REDIS_URL are unset.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("run", help="serve the app with its workers until Ctrl-C")
    exec_parser = commands.add_parser("exec", help="run CMD with the servers up")
    exec_parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run()
    return exec_command(args.cmd)


if __name__ == "__main__":
    sys.exit(main())
