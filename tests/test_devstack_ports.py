"""`make run`, `make examples` and `make drills` on one machine at once.

Two stacks' layouts (`devstack.layout`) side by side, as `make run` and `make examples` take
them: their sandbox providers, started from the command lines the stack supervises, listen on
ports of their own with stores of their own (emptying one, as `make examples` does before each
example, leaves the other's charges alone), a stack whose port is taken stops at once naming
the variable to set, and a stack whose payments sandbox is elsewhere declares the card tools
against it.

The drills: a database that remembers other keys (a `make run`'s) and an env file of another
stack stop neither `python -m devstack.drills` (`make drills`) nor `manage.py faultdrill` on
the system check `ledger.E001`, and the drill's processes take none of that env file's or the
caller's settings. Real processes on loopback; about 15 seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest
from django.db import connection

from devstack.drills.environment import drill_environment, drill_secrets
from devstack.embedded import spawn, stop_processes
from devstack.layout import DEFAULT_PORTS, StackLayout, free_layout, free_ports, tools_file
from devstack.provision import database_url
from devstack.stack import sandbox_services
from ledger.models import KeyFingerprint
from ledger.restore import keyring
from tests.helpers import ROOT

RUN_KEYS = "1:the-key-make-run-generated-0123456789"


def _run_layout(directory: Path) -> StackLayout:
    """`make run`'s layout with its ports moved (8000/8101/8102 may be a real `make run`'s on
    this machine): the same variables a user sets."""
    ports = free_ports(3)
    return StackLayout.from_env(
        {"STACK_DIR": str(directory), **dict(zip(DEFAULT_PORTS, map(str, ports), strict=True))}
    )


def _wait_healthy(url: str, timeout: float = 15.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(f"{url}/_sandbox/health", timeout=1, trust_env=False).json()
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_an_examples_layout_takes_none_of_make_runs_ports_or_files(tmp_path):
    run = StackLayout.from_env({})
    examples = free_layout(tmp_path / "examples", {})

    assert run.ports() == DEFAULT_PORTS and run.directory == ROOT / "var"
    assert set(examples.ports().values()).isdisjoint(run.ports().values())
    assert len(set(examples.ports().values())) == 3
    assert examples.run_env_file != run.run_env_file
    assert examples.store("payments") != run.store("payments")
    # A port given is kept; the others are still chosen free.
    given = free_layout(tmp_path / "examples", {"PORT": "18000"})
    assert given.port == 18000 and given.payments_port not in (8101, 18000)
    with pytest.raises(ValueError, match="SANDBOX_MESSAGING_PORT must be a number"):
        StackLayout.from_env({"SANDBOX_MESSAGING_PORT": "eighty"})
    with pytest.raises(ValueError, match="must differ"):
        StackLayout.from_env({"PORT": "8101"})


def test_two_stacks_sandboxes_run_side_by_side_each_with_its_own_store(tmp_path):
    layouts = [_run_layout(tmp_path / "run"), free_layout(tmp_path / "examples", {})]
    env = {**os.environ, "LEDGER_WEBHOOK_SECRETS": "sandbox-pay:webhook-secret-0123456789"}
    procs = [
        (service.name, spawn(service.argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL))
        for layout in layouts
        for service in sandbox_services("127.0.0.1", layout.port, layout)
    ]
    try:
        for layout in layouts:
            for provider in ("payments", "messaging"):
                health = _wait_healthy(layout.sandbox_url(provider))
                assert health["provider"] == provider
                assert Path(health["store"]) == layout.store(provider)
        run, examples = (layout.sandbox_url("payments") for layout in layouts)
        charge = httpx.post(
            f"{run}/charges",
            json={"amount": "25.00", "currency": "EUR", "account": "acct_42"},
            headers={"Idempotency-Key": "el_side_by_side"},
            trust_env=False,
        )
        assert charge.status_code == 201, charge.text
        # What `make examples` does before each example, to its own sandboxes only.
        for provider in ("payments", "messaging"):
            url = f"{layouts[1].sandbox_url(provider)}/_sandbox/reset"
            httpx.post(url, trust_env=False).raise_for_status()
        kept = httpx.get(f"{run}/charges/{charge.json()['id']}", trust_env=False)
        assert kept.status_code == 200 and kept.json()["amount"] == "25.00"
        listed = httpx.get(f"{examples}/_sandbox/transactions", trust_env=False).json()
        assert listed["data"] == []

        # A second stack on the first one's ports stops before starting anything, and says
        # which variable moves it.
        taken = subprocess.run(
            [sys.executable, "-m", "devstack.stack", "run"],
            cwd=ROOT,
            env={**os.environ, **layouts[0].as_env()},
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert taken.returncode == 1
        assert f"Port {layouts[0].payments_port} on 127.0.0.1 is in use" in taken.stderr
        assert "set SANDBOX_PAYMENTS_PORT" in taken.stderr
    finally:
        stop_processes(procs, timeout=5)


def test_a_stack_whose_payments_sandbox_is_elsewhere_declares_the_card_tools_against_it(tmp_path):
    layout = free_layout(tmp_path, {})
    tools = tomllib.loads(tools_file(layout).read_text())["tools"]
    for name in ("charge_card", "refund_card"):
        assert tools[name]["reconciler_config"]["base_url"] == layout.sandbox_url("payments")
    assert tools_file(StackLayout.from_env({})) == ROOT / "tools.toml"


def _run_env_file(tmp_path: Path) -> Path:
    """What `make run` writes for a second shell: its keys, its database, and a setting."""
    path = tmp_path / "run.env"
    path.write_text(
        f"SECRET_KEY=make-run-secret-key-0123456789abcdef\nLEDGER_KEYS={RUN_KEYS}\n"
        "DATABASE_URL=postgres://postgres@/effect_ledger?host=/nonexistent\n"
        "LEDGER_MAX_WAITERS=1\nLOG_LEVEL=CRITICAL\n"
    )
    return path


@pytest.mark.django_db(transaction=True)
def test_the_drills_start_beside_a_database_with_make_runs_keys(tmp_path):
    # The database remembers the keys of `make run`, whose env file the caller's shell names;
    # the caller's keys are others (the suite's). `manage.py check` refuses here (E001).
    KeyFingerprint.objects.all().delete()
    version, secret = RUN_KEYS.split(":", 1)
    KeyFingerprint.objects.create(
        version=int(version), fingerprint=keyring.fingerprint(secret.encode())
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(os.environ["DATABASE_URL"], connection.settings_dict["NAME"]),
        "LEDGER_ENV_FILE": str(_run_env_file(tmp_path)),
    }
    check = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert check.returncode != 0 and "ledger.E001" in check.stderr

    # Both entries of the drills get past Django's start to their own argument check (an
    # outage longer than the load is refused before any server starts).
    too_long = ["web", "--seconds", "1", "--outage", "1"]
    for argv in (["-m", "devstack.drills"], ["manage.py", "faultdrill"]):
        done = subprocess.run(
            [sys.executable, *argv, *too_long], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert "--outage must end within the load" in done.stderr, done.stderr[-2000:]
        assert "E001" not in done.stderr


_SETTINGS = (
    "import json, os; from django.conf import settings; print(json.dumps({"
    "'keys': {str(v): k.decode() for v, k in settings.LEDGER_KEYS.items()}, "
    "'secret': settings.SECRET_KEY, 'database': settings.DATABASES['default']['NAME'], "
    "'waiters': settings.LEDGER_MAX_WAITERS, 'env_file': os.environ['LEDGER_ENV_FILE'], "
    "'stack_dir': os.environ.get('STACK_DIR')}))"
)


def test_a_drills_processes_take_nothing_from_make_runs_env_file_or_the_caller(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("LEDGER_ENV_FILE", str(_run_env_file(tmp_path)))
    monkeypatch.setenv("LEDGER_KEYS", RUN_KEYS)
    monkeypatch.setenv("LEDGER_MAX_WAITERS", "1")
    monkeypatch.setenv("STACK_DIR", str(tmp_path))
    drill_db = database_url(os.environ["DATABASE_URL"], "faultdrill")
    env = drill_environment(drill_db, os.environ["REDIS_URL"])
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", _SETTINGS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    own = drill_secrets()
    assert seen["keys"] == dict(part.split(":", 1) for part in own["LEDGER_KEYS"].split(","))
    assert seen["keys"] != {"1": RUN_KEYS.split(":", 1)[1]}
    assert seen["secret"] == own["SECRET_KEY"]
    assert seen["database"] == "faultdrill"
    assert seen["waiters"] != 1
    assert seen["env_file"] == os.devnull
    assert seen["stack_dir"] is None
