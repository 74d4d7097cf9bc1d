"""Run the Effect Ledger with everything it needs, on a bare machine.

    python -m devstack.stack run              # `make run`: the whole service, until Ctrl-C
    python -m devstack.stack exec -- CMD ...  # `make test`, `make bench`: CMD with servers up

Both commands first make sure PostgreSQL and Redis are reachable: when `DATABASE_URL` or
`REDIS_URL` is unset (or empty) an embedded server is started for it (see `devstack.embedded`)
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
    as defaults, so `python manage.py ...` works from a second shell while the stack runs (its
    own children are pointed at it with LEDGER_ENV_FILE);
  * migrates, collects static files, loads `tools.toml` (a copy pointing at the payments
    sandbox's port when that is not 8101), creates the `demo` agent and the
    `operator` admin if missing (their credentials are printed only when created;
    `devstack.provision`);
  * starts the web server (gunicorn behind nginx on HOST:PORT, see
    `devstack.web`), an rq worker and the django-q cluster (plus `sandbox_services()`), and
    supervises them (`devstack.supervisor`): one that dies is started again; one that dies more
    than five times in a minute stops the stack, which then exits non-zero.

Environment read here: DATABASE_URL, REDIS_URL, HOST (default 127.0.0.1), PORT (default 8000),
SANDBOX_PAYMENTS_PORT (8101), SANDBOX_MESSAGING_PORT (8102), STACK_DIR (default var/: every file
named above and below lives there instead; `devstack.layout`), GUNICORN_WORKERS (default 2),
GUNICORN_THREADS (default 4), and the secrets above. Every child gets
PROMETHEUS_MULTIPROC_DIR=var/prometheus, emptied at start, so that /metrics adds up the
counters of all gunicorn workers, the rq worker and the django-q cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from config.envfile import read_env_file, write_env_file
from devstack.embedded import ROOT, VAR, EmbeddedServers, say, spawn, stop_processes
from devstack.layout import StackLayout, stack_dir, tools_file
from devstack.provision import manage_argv, prepare
from devstack.sandbox.launch import provider_argv
from devstack.signals import Shutdown, SignalGate, signal_exit_code
from devstack.supervisor import ChildDied, Service, Supervisor
from devstack.web import upstream_accepts, web_services

SECRETS_FILE = VAR / "secrets.env"
SECRET_NAMES = ("SECRET_KEY", "LEDGER_KEYS", "LEDGER_WEBHOOK_SECRETS", "LEDGER_METRICS_TOKEN")
# The Stripe key the demo's card tools name (tools.toml): the payments sandbox's Stripe face
# takes any test key. Set it to your own test key when base_url points at Stripe.
STRIPE_KEY_NAME, SANDBOX_STRIPE_KEY = "STRIPE_TEST_SECRET_KEY", "sk_test_effect_ledger_sandbox"
RUN_ENV_NAMES = ("DATABASE_URL", "REDIS_URL", *SECRET_NAMES, STRIPE_KEY_NAME)
# Providers whose callbacks the demo's tools take: the sandbox's own scheme and Stripe's.
WEBHOOK_PROVIDERS = ("sandbox-pay", "stripe")
STOP_TIMEOUT = 10.0  # seconds between SIGTERM and SIGKILL for each child
STARTUP_TIMEOUT = 60.0  # seconds gunicorn may take to accept connections


# --- Secrets -------------------------------------------------------------------------------


def generate_secret(name: str) -> str:
    if name == "SECRET_KEY":
        return secrets.token_urlsafe(48)
    if name == "LEDGER_KEYS":
        return f"1:{secrets.token_urlsafe(32)}"  # keyring version 1; rotate by adding 2:...
    if name == "LEDGER_WEBHOOK_SECRETS":
        return ",".join(f"{p}:{_webhook_secret(p)}" for p in WEBHOOK_PROVIDERS)
    if name == "LEDGER_METRICS_TOKEN":
        return secrets.token_urlsafe(32)
    raise ValueError(name)


def _webhook_secret(provider: str) -> str:
    # Stripe's signing secrets look like whsec_…; the sandbox signs with whatever it is given.
    return ("whsec_" if provider == "stripe" else "") + secrets.token_urlsafe(32)


def _with_every_webhook_provider(stored: dict[str, str]) -> list[str]:
    """Secrets stored before a provider was added get one for it (the others kept as they
    are); returns the names changed."""
    value = stored.get("LEDGER_WEBHOOK_SECRETS", "")
    if not value:
        return []
    named = {entry.split(":", 1)[0].strip() for entry in value.split(",")}
    added = [f"{p}:{_webhook_secret(p)}" for p in WEBHOOK_PROVIDERS if p not in named]
    if added:
        stored["LEDGER_WEBHOOK_SECRETS"] = ",".join([value, *added])
        return ["LEDGER_WEBHOOK_SECRETS"]
    return []


def load_secrets(path: Path = SECRETS_FILE) -> dict[str, str]:
    """The stored secrets, generating (and storing) any that are missing."""
    stored = read_env_file(path)
    missing = [name for name in SECRET_NAMES if not stored.get(name)]
    missing += _with_every_webhook_provider(stored)
    if missing:
        stored.update({name: generate_secret(name) for name in missing if not stored.get(name)})
        write_env_file(
            path,
            {name: stored[name] for name in SECRET_NAMES},
            "Generated by `make run`. Keep stable: idempotency keys are HMACs under LEDGER_KEYS.",
        )
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        say(f"Generated {', '.join(missing)} into {shown}.")
    else:
        path.chmod(0o600)
    return stored


# --- Child processes -------------------------------------------------------------------------


def sandbox_services(host: str, port: int, layout: StackLayout | None = None) -> list[Service]:
    """The sandbox providers the demo tools call: card payments (keys, lookup, signed webhooks
    back to this ledger) and messaging (no keys, no lookup), on the layout's ports with their
    stores in its directory (`make run`'s: 8101, 8102, var/sandbox). The webhook secret
    reaches the payments sandbox through LEDGER_WEBHOOK_SECRETS in its environment, not its
    argv."""
    layout = layout or StackLayout.from_env({})
    webhook_url = f"http://{_bracket(host)}:{port}/api/v1/webhooks/sandbox-pay"
    payments = ["--store", str(layout.store("payments")), "--webhook-url", webhook_url]
    return [
        Service("sandbox-payments", provider_argv("payments", layout.payments_port, *payments)),
        Service(
            "sandbox-messaging",
            provider_argv(
                "messaging", layout.messaging_port, "--store", str(layout.store("messaging"))
            ),
        ),
    ]


def app_services(host: str, port: int, layout: StackLayout | None = None) -> list[Service]:
    """Everything `run` keeps running, in start order (it stops them in reverse)."""
    web = web_services(
        host,
        port,
        workers=os.environ.get("GUNICORN_WORKERS", "2"),
        threads=os.environ.get("GUNICORN_THREADS", "4"),
    )
    return [
        *sandbox_services(host, port, layout),
        *web,  # gunicorn, then nginx on host:port (devstack.web)
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
            if upstream_accepts(port):  # gunicorn, behind nginx
                return
        time.sleep(0.2)
    raise RuntimeError(
        f"The web server did not accept connections on port {port} within {STARTUP_TIMEOUT:.0f} s."
    )


def fresh_metrics_dir(path: Path = VAR / "prometheus") -> Path:
    """An empty directory for the counters of every process of this run
    (`ledger.observability.metrics`): files a previous run left would otherwise be added to
    this run's counts."""
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


# --- Commands --------------------------------------------------------------------------------


def _listen_address() -> tuple[str, StackLayout] | int:
    """HOST nginx serves on and the stack's layout (ports, directory), or the exit code when
    they cannot be used: a port that is no number, or one in use, names its variable."""
    host = os.environ.get("HOST") or "127.0.0.1"
    try:
        layout = StackLayout.from_env(os.environ)
    except ValueError as exc:
        say(str(exc))
        return 2
    for name, port in layout.ports().items():
        bind_host = host if name == "PORT" else "127.0.0.1"  # the sandboxes bind loopback
        if not _port_free(bind_host, port):
            say(f"Port {port} on {bind_host} is in use; stop what holds it or set {name}.")
            return 1
    return host, layout


def _run_env(servers: EmbeddedServers, gate: SignalGate, layout: StackLayout) -> dict[str, str]:
    """The children's environment: the caller's, the stored secrets where it has none, the
    servers' URLs (starting embedded ones as needed), written to the layout's run.env for a
    second shell (and named to the children as their LEDGER_ENV_FILE), and a fresh directory
    for the counters."""
    env = dict(os.environ)
    for name, value in load_secrets(layout.secrets_file).items():
        if not env.get(name):
            env[name] = value
    if not env.get(STRIPE_KEY_NAME):
        env[STRIPE_KEY_NAME] = SANDBOX_STRIPE_KEY
    servers.start(env, guard=gate.deferred)
    write_env_file(
        layout.run_env_file,
        {name: env[name] for name in RUN_ENV_NAMES},
        "Written by `make run` for `manage.py` in another shell; the URLs only work while it runs.",
    )
    env["LEDGER_ENV_FILE"] = str(layout.run_env_file)
    env.setdefault("PYTHONUNBUFFERED", "1")  # child logs appear as they happen
    env["PROMETHEUS_MULTIPROC_DIR"] = str(fresh_metrics_dir(layout.metrics_dir))
    return env


def _serve(
    supervisor: Supervisor,
    servers: EmbeddedServers,
    gate: SignalGate,
    host: str,
    layout: StackLayout,
) -> None:
    """Start the app's processes, say where it answers, then supervise until a signal
    (`Shutdown`) or a child that keeps dying (`ChildDied`)."""
    port = layout.port
    for service in app_services(host, port, layout):
        with gate.deferred():  # started means registered for stopping
            say(f"starting {service.name}")
            supervisor.start(service)
    _wait_for_http(host, port, supervisor, servers)
    base = f"http://{_bracket(host)}:{port}"
    print(
        f"\nEffect Ledger is running at {base}/ — API docs: {base}/api/v1/docs\n"
        f"Sandboxes: payments {layout.sandbox_url('payments')}, "
        f"messaging {layout.sandbox_url('messaging')}\n"
        "Press Ctrl-C to stop.\n",
        flush=True,
    )
    while True:
        _check_children(supervisor, servers)
        time.sleep(0.5)


def run() -> int:
    address = _listen_address()
    if isinstance(address, int):
        return address
    host, layout = address
    gate = SignalGate()
    gate.install()
    servers = EmbeddedServers(layout.directory)
    supervisor: Supervisor | None = None
    try:
        env = _run_env(servers, gate, layout)
        prepare(env, tools=tools_file(layout))
        supervisor = Supervisor(env, ROOT)
        _serve(supervisor, servers, gate, host, layout)
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


def _start_foreground(
    cmd: list[str], env: dict[str, str], gate: SignalGate
) -> subprocess.Popen[bytes]:
    """CMD in the same process group as the stack: it keeps the terminal (pytest --pdb works)
    and gets Ctrl-C directly; the gate passes it SIGTERM and SIGHUP."""
    with gate.deferred():
        child = spawn(cmd, env=env, own_group=False)
        gate.forward_to(child)
    return child


def _stop_foreground(child: subprocess.Popen[bytes] | None) -> None:
    if child is not None and child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            child.kill()


def exec_command(cmd: list[str]) -> int:
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        say("exec needs a command: python -m devstack.stack exec -- CMD [ARGS...]")
        return 2
    gate = SignalGate()
    gate.install()
    servers = EmbeddedServers(stack_dir(os.environ))
    child: subprocess.Popen[bytes] | None = None
    try:
        env = dict(os.environ)
        servers.start(env, guard=gate.deferred)
        try:
            child = _start_foreground(cmd, env, gate)
        except OSError as exc:
            say(f"cannot run {cmd[0]}: {exc}")
            return 127
        returncode = child.wait()
        return returncode if returncode >= 0 else signal_exit_code(-returncode)
    except Shutdown as stop:
        say(f"{stop}: stopping.")
        return signal_exit_code(stop.signum)
    except subprocess.CalledProcessError as exc:
        say(f"could not start the servers: {_describe(exc.cmd)} failed ({exc.returncode}).")
        return 1
    except RuntimeError as exc:
        say(f"could not start the servers: {exc}")
        return 1
    finally:
        gate.quiet()
        _stop_foreground(child)
        servers.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m devstack.stack",
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
