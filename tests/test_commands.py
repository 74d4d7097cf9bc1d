"""createagent, createoperator, loadtools, revokekey."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from ledger.models import Tool
from ledger.policy.agentkeys import agent_for_key


def _run(*args: str, stdin: str | None = None, monkeypatch=None) -> str:
    out = io.StringIO()
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    call_command(*args, stdout=out)
    return out.getvalue()


def test_createagent_prints_a_working_key_as_its_last_line(db):
    key = _run("createagent", "planner").strip().splitlines()[-1]
    assert agent_for_key(key).name == "planner"


def test_createagent_for_an_existing_agent_adds_a_second_key(db):
    first = _run("createagent", "planner").strip().splitlines()[-1]
    second = _run("createagent", "planner").strip().splitlines()[-1]
    assert first != second
    assert agent_for_key(first) == agent_for_key(second)


def test_revokekey_makes_a_key_useless(db):
    key = _run("createagent", "planner").strip().splitlines()[-1]
    name = key[: len("elk_live_") + 12]  # the public part: elk_live_<prefix>
    _run("revokekey", name)
    assert agent_for_key(key) is None
    with pytest.raises(CommandError):
        _run("revokekey", name)


def test_createoperator_reads_the_password_from_stdin(db, monkeypatch):
    _run(
        "createoperator",
        "olga",
        "--role",
        "auditor",
        stdin="a long passphrase 42\n",
        monkeypatch=monkeypatch,
    )
    user = User.objects.get(username="olga")
    assert user.check_password("a long passphrase 42")
    assert list(user.groups.values_list("name", flat=True)) == ["auditor"]
    assert not user.is_staff


def test_createoperator_refuses_a_weak_password(db, monkeypatch):
    with pytest.raises(CommandError):
        _run("createoperator", "olga", stdin="123\n", monkeypatch=monkeypatch)
    assert not User.objects.filter(username="olga").exists()


def test_loadtools_declares_all_four_classifications(db):
    _run("loadtools", str(Path(__file__).resolve().parent.parent / "tools.toml"))
    kinds = {t.name: t.classification for t in Tool.objects.all()}
    assert kinds["get_balance"] == "read_only"
    assert kinds["send_email"] == "unsafe"
    assert kinds["create_ticket"] == "lookup"
    assert kinds["charge_card"] == "idempotent+lookup"
    assert Tool.objects.get(name="charge_card").compensated_by == "refund_card"


def test_loadtools_refuses_a_bad_file_and_changes_nothing(db, tmp_path):
    bad = tmp_path / "tools.toml"
    bad.write_text('[tools.a]\npreset = "idempotent"\n[tools.b]\nkey_ttl = "soon"\n')
    with pytest.raises(CommandError, match="key_ttl"):
        _run("loadtools", str(bad))
    assert not Tool.objects.exists()
