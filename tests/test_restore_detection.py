"""How soon the ledger knows it went back in time, within processes that were never restarted.

- A standby promoted after asynchronous replication is on a newer timeline than the witness
  saw: a finding, unless the witness saw replication synchronous.
- A process whose connection reaches another server than before (a failover, a restore)
  compares with the witness before its next agent request is served.
- Halts and revocations write the witness as they commit, so that one set in the last seconds
  before a loss comes back (not while restore mode is on: the witness keeps the lost branch).
- What the lost branch spent against amount limits is counted as used.

The database is the suite's own; a witness from *later* than it is what a lossy failover or a
restore leaves behind (see tests/test_restore_mode.py).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ledger.audit import witness
from ledger.audit.seal import seal_all
from ledger.containment import halts, keys
from ledger.models import ApiKey, RestoreSource
from ledger.restore import incarnation, mode
from tests.test_limits import charge, limit_tool, refused
from tests.test_restore_mode import later

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def witness_file(tmp_path, settings):
    settings.LEDGER_WITNESS_PATH = str(tmp_path / "witness" / "ledger.json")
    settings.LEDGER_SEAL_GRACE = 0
    return tmp_path / "witness" / "ledger.json"


def test_a_newer_timeline_is_a_finding_unless_replication_was_synchronous(witness_file, alice):
    alice.intent("run-t", "charge", tool="charge_card", target="acct_1", request={})
    state = witness.snapshot()
    assert state["synchronous"] is False  # the suite's server has no synchronous standby
    assert isinstance(state["timeline"], int)
    # The witness saw the previous timeline: this server is a standby promoted since.
    before_promotion = {**state, "timeline": state["timeline"] - 1}
    findings = witness.compare(before_promotion)
    assert [f.check for f in findings] == ["promotion"]
    assert "no synchronous standby" in findings[0].detail
    # With a synchronous standby the promoted one holds every acknowledged commit.
    assert witness.compare({**before_promotion, "synchronous": True}) == []
    assert witness.compare(state) == []


def test_a_process_on_another_server_checks_the_witness_before_the_next_intent(
    witness_file, alice, tools
):
    first = alice.intent("run-i", "email-0", tool="send_email", target="a@x.test", request={})
    assert first["status"] == "planned"
    seal_all()
    witness.write()
    # What the lost commits would have added: the witness is ahead of the database.
    witness_file.write_text(json.dumps(later(witness.read())))
    # Still on the server it knows: no comparison until the sweep's next minute.
    again = alice.intent("run-i", "email-1", tool="send_email", target="a@x.test", request={})
    assert again["status"] == "planned" and mode.current() is None

    # The connection breaks; this process was last on another server (a start time of its
    # own), and the next connection reaches this one.
    incarnation._seen = ("a server that has gone", "127.0.0.9", 5432)
    connection.close()
    after = alice.intent("run-i", "email-2", tool="send_email", target="a@x.test", request={})
    window = mode.current()
    assert window is not None and window.source == RestoreSource.WITNESS
    assert after["status"] == "unknown"  # recorded in restore mode, not before it
    # The check ran once: the next request is served as usual.
    assert incarnation._due is False


def test_a_halt_a_resume_and_a_revocation_write_the_witness_as_they_commit(witness_file, alice):
    assert not witness_file.exists()
    switched = halts.halt("tool", "send_email", reason="drill", by="shell:t")
    written = json.loads(witness_file.read_text())
    assert [(h["scope"], h["value"]) for h in written["halts"]] == [("tool", "send_email")]

    prefix = ApiKey.objects.filter(agent=alice.agent).values_list("prefix", flat=True).first()
    assert keys.revoke(prefix)
    assert json.loads(witness_file.read_text())["revoked_keys"] == [prefix]

    halts.resume(switched.halt.pk, reason="over", by="shell:t")
    assert json.loads(witness_file.read_text())["halts"] == []


def test_in_restore_mode_a_halt_leaves_the_witness_of_the_lost_branch(witness_file, alice):
    halts.halt("tool", "send_email", reason="before the loss", by="shell:t")
    kept = witness_file.read_text()
    mode.begin(lost_since=timezone.now() - timedelta(minutes=5), reason="restored", by="shell:t")
    halts.halt("tool", "create_ticket", reason="in the window", by="shell:t")
    assert witness_file.read_text() == kept


def test_what_the_lost_branch_spent_against_a_limit_is_counted_as_used(witness_file, alice):
    limit_tool(limit_amount_per_day={"EUR": "100.00"})
    alice.claim(charge(alice, "kept", "30.00")["id"])
    seal_all()
    state = witness.snapshot()
    assert state["spend"] == {"tool:charge_card|EUR": 3000}
    # The lost branch had claimed 60.00 more before the witness was written.
    lost = later(state)
    lost["spend"] = {"tool:charge_card|EUR": 9000}

    entered = mode.begin(
        lost_since=timezone.now() - timedelta(minutes=5), reason="restored", by="shell:t",
        witness=lost,
    )  # fmt: skip

    assert entered.window.applied["spend"] == {"tool:charge_card|EUR": 6000}
    error = refused(alice, charge(alice, "after", "20.00"))
    assert error["limit"]["current"] == "90.00"
    assert alice.claim(charge(alice, "small", "10.00")["id"])["status"] == "dispatching"
