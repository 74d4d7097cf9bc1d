"""Keys and modes: key rotation and expiry, last use, test and live agents and tools, and the
rotation of LEDGER_KEYS and webhook secrets."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from ledger.api.webhooks import sign
from ledger.containment.keys import issue_key
from ledger.models import Agent, ApiKey, ConfigVersion, Effect, Reason, Run
from ledger.policy import configversion, digests, keyuse
from ledger.policy.agentkeys import agent_for_key, key_prefix
from ledger.policy.toolfile import ToolFileError, load
from ledger.rules.reviewqueue import open_review
from tests.factories import signed_in
from tests.helpers import ROOT, AgentClient, assert_error

TEST_TOOLS = """
[tools.sandbox_charge]
preset = "idempotent"
mode = "test"
compensated_by = "refund_card"  # a live tool: a test agent may still not name it
"""


@pytest.fixture
def sandbox_tools(tools, tmp_path: Path) -> None:
    path = tmp_path / "sandbox_tools.toml"
    path.write_text(TEST_TOOLS)
    load(path)


@pytest.fixture
def tess(db, tools, sandbox_tools) -> AgentClient:
    """A test agent."""
    agent = Agent.objects.create(name="tess", mode="test")
    return AgentClient(agent, issue_key(agent))


def _status(key: str) -> int:
    configversion.expire()  # as another process would: read the key and the version again
    return Client().get("/api/v1/effects", headers={"Authorization": f"Bearer {key}"}).status_code


def _command(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def _version() -> int:
    return ConfigVersion.objects.get(pk=1).version


def _last_used(key: str):
    return ApiKey.objects.get(prefix=key_prefix(key)).last_used_at


def _backdate_last_use(key: str, seconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_apikey SET last_used_at = now() - make_interval(secs => %s) "
            "WHERE prefix = %s",
            [seconds, key_prefix(key)],
        )
    configversion.expire()


# --- Key shape and mode ------------------------------------------------------------------------


def test_a_key_says_its_agents_mode(alice, tess):
    assert alice.key.startswith("elk_live_")
    assert tess.key.startswith("elk_test_")
    assert _status(alice.key) == 200
    assert _status(tess.key) == 200


def test_a_key_issued_before_modes_existed_still_works_as_a_live_key(alice):
    old = f"elk_0123456789ab_{'s' * 43}"
    ApiKey.objects.create(
        agent=alice.agent, prefix="0123456789ab", digest=hashlib.sha256(old.encode()).hexdigest()
    )
    assert _status(old) == 200
    assert agent_for_key(old) == alice.agent


def test_a_key_is_refused_once_its_mode_no_longer_matches_its_agents(alice):
    before = _version()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_agent SET mode = 'test' WHERE id = %s", [alice.agent.id])
    assert _version() != before  # every process forgets what it remembered of the key
    assert_error(alice.get("/effects"), 401, "unauthorized")


def test_existing_agents_and_tools_are_live(db, tools):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO ledger_agent (name, is_active, created_at) VALUES ('x', true, now())"
        )
    assert Agent.objects.get(name="x").mode == "live"
    assert {tool.mode for tool in tools.values()} == {"live"}


# --- Rotation and expiry -----------------------------------------------------------------------


def test_rotation_gives_a_second_live_key_and_the_old_one_expires_when_said(alice):
    lines = _command("rotatekey", "alice", "--expire-old-after", "1h")
    new = lines[-1]
    assert new.startswith("elk_live_") and new != alice.key
    assert "1 old key(s) expire in 1h" in lines[0]
    # Both keys work during the overlap.
    assert (_status(alice.key), _status(new)) == (200, 200)
    old_row = ApiKey.objects.get(prefix=key_prefix(alice.key))
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s - clock_timestamp()", [old_row.expires_at])
        left = cursor.fetchone()[0]
    assert timedelta(minutes=59) < left <= timedelta(hours=1)
    assert ApiKey.objects.get(prefix=key_prefix(new)).expires_at is None
    # The hour passes (back-dated in SQL): the old key is refused, the new one is not.
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_apikey SET expires_at = now() - interval '1 second' WHERE id = %s",
            [old_row.id],
        )
    assert _status(alice.key) == 401
    assert _status(new) == 200


def test_rotating_again_never_extends_an_earlier_expiry(alice):
    _command("rotatekey", "alice", "--expire-old-after", "1h")
    first = ApiKey.objects.get(prefix=key_prefix(alice.key)).expires_at
    _command("rotatekey", "alice", "--expire-old-after", "7d")
    assert ApiKey.objects.get(prefix=key_prefix(alice.key)).expires_at == first


def test_rotatekey_refuses_the_system_agent_an_unknown_agent_and_a_bad_duration(alice):
    Agent.objects.get_or_create(name="system")
    keys = ApiKey.objects.count()
    for args, message in (
        (("system",), "reserved"),
        (("nobody",), "No agent"),
        (("alice", "--expire-old-after", "soon"), "not a duration"),
    ):
        with pytest.raises(CommandError, match=message):
            _command("rotatekey", *args)
    assert ApiKey.objects.count() == keys
    assert ApiKey.objects.get(prefix=key_prefix(alice.key)).expires_at is None


def test_listkeys_shows_each_keys_dates_and_never_a_secret(alice):
    new = _command("rotatekey", "alice", "--expire-old-after", "2h")[-1]
    ApiKey.objects.filter(prefix=key_prefix(new)).update(label="after rotation")
    lines = _command("listkeys", "alice")
    text = "\n".join(lines)
    assert lines[0] == "Agent 'alice' (live), 2 key(s):"
    assert lines[1].split() == ["prefix", "label", "created", "last", "used", "expires", "revoked"]
    old_line = next(line for line in lines if key_prefix(alice.key) in line)
    assert "never" in old_line and old_line.rstrip().endswith("no")  # not used, not revoked
    assert "after rotation" in text
    assert alice.key not in text and new not in text
    assert alice.key.split("_", 3)[3] not in text and new.split("_", 3)[3] not in text


def test_revokekey_takes_the_key_name_with_its_mode(alice):
    _command("revokekey", alice.key[: len("elk_live_") + 12])
    assert_error(alice.get("/effects"), 401, "unauthorized")


# --- Last use ----------------------------------------------------------------------------------


def test_a_writing_call_stamps_the_keys_last_use_and_reads_do_not(alice):
    assert _last_used(alice.key) is None
    alice.get("/effects")
    assert _last_used(alice.key) is None  # a GET makes no write to ride on
    alice.intent()
    assert _last_used(alice.key) is not None


def test_the_last_use_is_written_at_most_once_a_minute(alice):
    alice.intent("run-1")
    assert _last_used(alice.key) is not None
    alice.intent("run-2")
    _backdate_last_use(alice.key, 30)
    thirty_ago = _last_used(alice.key)
    alice.intent("run-3")
    assert _last_used(alice.key) == thirty_ago  # within the minute: untouched
    # Even a process that believes the key due (it last saw it long ago) cannot stamp twice.
    keyuse.observe(ApiKey.objects.get(prefix=key_prefix(alice.key)).id, 3600)
    alice.intent("run-4")
    assert _last_used(alice.key) == thirty_ago
    _backdate_last_use(alice.key, 61)
    a_minute_ago = _last_used(alice.key)
    alice.intent("run-5")
    assert _last_used(alice.key) > a_minute_ago


def test_stamping_the_last_use_costs_no_round_trip_and_keeps_the_configuration_version(alice):
    def intent_queries(run: str) -> list[str]:
        configversion.expire()  # both calls authenticate with a query, like a cold process
        with CaptureQueriesContext(connection) as queries:
            alice.intent(run)
        return [q["sql"] for q in queries.captured_queries]

    alice.intent("warm-up")  # the tool's policy is read and cached once
    _backdate_last_use(alice.key, 120)
    version = _version()
    due = intent_queries("run-1")
    not_due = intent_queries("run-2")
    assert len(due) == len(not_due)
    assert sum("key_used" in sql for sql in due) == 1
    assert not any("key_used" in sql for sql in not_due)
    assert _last_used(alice.key) is not None
    assert _version() == version


def test_a_heartbeat_stamps_the_last_use_in_its_own_update(alice):
    effect = alice.intent(claim=True)
    _backdate_last_use(alice.key, 120)
    before = _last_used(alice.key)
    response = alice.post(
        f"/effects/{effect['id']}/heartbeat", {"lease_token": effect["lease_token"]}
    )
    assert response.status_code == 200, response.content
    assert _last_used(alice.key) > before


def test_a_refused_call_stamps_nothing(alice):
    alice.intent("run-1", step_id="a", request={"amount": "1.00"})
    _backdate_last_use(alice.key, 120)
    before = _last_used(alice.key)
    # The same key with a different request: refused before anything is written.
    alice.intent("run-1", step_id="a", request={"amount": "2.00"}, expect=409)
    assert _last_used(alice.key) == before


def test_only_the_columns_authentication_reads_move_the_configuration_version(alice):
    key_id = ApiKey.objects.get(prefix=key_prefix(alice.key)).id
    version = _version()
    with connection.cursor() as cursor:
        cursor.execute("UPDATE ledger_apikey SET last_used_at = now() WHERE id = %s", [key_id])
        cursor.execute("UPDATE ledger_apikey SET label = 'renamed' WHERE id = %s", [key_id])
    assert _version() == version
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_apikey SET expires_at = now() + interval '1 hour' WHERE id = %s",
            [key_id],
        )
    assert _version() != version


# --- Modes -------------------------------------------------------------------------------------


def test_a_test_agent_may_name_only_test_tools(tess):
    recorded = tess.intent(tool="sandbox_charge", claim=True)
    assert recorded["status"] == "dispatching"
    for tool in ("charge_card", "never_declared"):
        body = assert_error(
            tess.post(
                "/effects",
                {"run_id": "r", "step_id": tool, "tool": tool, "target": "t", "request": {}},
            ),
            403,
            "forbidden",
        )
        assert body["tool"] == tool
    # Refused before anything was written: no effect, no event, no run counter.
    assert list(Effect.objects.filter(agent=tess.agent).values_list("tool", flat=True)) == [
        "sandbox_charge"
    ]
    assert list(Run.objects.filter(agent=tess.agent).values_list("run_id", flat=True)) == ["run-1"]


def test_a_test_agent_cannot_compensate_with_a_live_tool(tess):
    effect = tess.intent(tool="sandbox_charge", claim=True)
    tess.outcome(effect["id"], effect["lease_token"])
    response = tess.post(f"/effects/{effect['id']}/compensate", {"tool": "refund_card"})
    assert_error(response, 403, "forbidden")


def test_a_live_agent_may_name_test_and_live_tools(alice, sandbox_tools):
    alice.intent("run-1", tool="sandbox_charge")
    alice.intent("run-2", tool="charge_card")


def test_a_tool_file_declares_a_mode(db, tmp_path: Path):
    path = tmp_path / "tools.toml"
    path.write_text('[tools.t]\npreset = "unsafe"\nmode = "staging"\n')
    with pytest.raises(ToolFileError, match="mode must be one of"):
        load(path)


def test_createagent_makes_test_agents_and_never_changes_a_mode(db):
    key = _command("createagent", "tess", "--mode", "test")[-1]
    assert key.startswith("elk_test_")
    assert Agent.objects.get(name="tess").mode == "test"
    assert _command("createagent", "tess")[-1].startswith("elk_test_")  # another key, same mode
    with pytest.raises(CommandError, match="exists as a test agent"):
        _command("createagent", "tess", "--mode", "live")
    assert _command("createagent", "plain")[-1].startswith("elk_live_")


def test_the_overview_and_the_queue_filter_by_mode(alice, tess, olga):
    live = alice.intent("run-1", claim=True)
    alice.outcome(live["id"], live["lease_token"], "unknown")
    test = tess.intent("run-1", tool="sandbox_charge", claim=True)
    tess.outcome(test["id"], test["lease_token"], "unknown")
    for effect in (live, test):
        open_review(effect["id"], Reason.INCONCLUSIVE)
    page = signed_in(olga)

    def queue(mode: str) -> str:
        return page.get("/queue/", {"mode": mode}).content.decode()

    assert test["id"] in queue("test") and live["id"] not in queue("test")
    assert live["id"] in queue("live") and test["id"] not in queue("live")
    assert live["id"] in queue("") and test["id"] in queue("")

    def by_tool(mode: str) -> str:
        html = page.get("/", {"mode": mode}).content.decode()
        return html[html.index('id="by-tool"') :]

    assert "sandbox_charge" in by_tool("test") and "charge_card" not in by_tool("test")
    assert "charge_card" in by_tool("live") and "sandbox_charge" not in by_tool("live")
    assert "charge_card" in by_tool("") and "sandbox_charge" in by_tool("")
    assert 'hx-get="/?mode=test"' in page.get("/", {"mode": "test"}).content.decode()


# --- Rotating the server's secrets -------------------------------------------------------------

OLD_KEY, NEW_KEY = b"first-ledger-key-0123456789", b"second-ledger-key-0123456789"


def test_what_a_new_ledger_key_version_changes_and_what_stays_stable(settings):
    settings.LEDGER_KEYS = {1: OLD_KEY}
    request = {"amount": "10.00", "card": "4111111111111111"}
    idempotency = digests.idempotency_key(7, "run:step")
    request_hash = digests.request_hash("charge_card", "acct", request)
    token = digests.redaction_token("card", "4111111111111111")
    outcome = digests.value_digest({"status": "confirmed"})

    settings.LEDGER_KEYS = {1: OLD_KEY, 2: NEW_KEY}
    # Stable: the idempotency key (the first version's), so a provider sees the same key.
    assert digests.idempotency_key(7, "run:step") == idempotency
    # Verifiable: what was made under version 1 is checked under version 1.
    assert digests.same_request(request_hash, "charge_card", "acct", request)
    assert not digests.same_request(request_hash, "charge_card", "acct", {"amount": "11.00"})
    assert digests.same_value(outcome, {"status": "confirmed"})
    assert not digests.same_value(outcome, {"status": "failed"})
    assert digests.token_matches(token, "card", "4111111111111111")
    assert not digests.token_matches(token, "card", "4012888888881881")
    # Changed: what is made from now on uses version 2.
    assert digests.request_hash("charge_card", "acct", request).startswith("v2:")
    assert digests.value_digest({"status": "confirmed"}).startswith("v2:")
    assert digests.redaction_token("card", "4111111111111111") != token
    # A version no longer in the ring verifies nothing.
    settings.LEDGER_KEYS = {2: NEW_KEY}
    assert not digests.same_request(request_hash, "charge_card", "acct", request)
    assert not digests.token_matches(token, "card", "4111111111111111")


def test_a_repeated_intent_and_outcome_are_still_repeats_after_a_key_rotation(alice, settings):
    settings.LEDGER_KEYS = {1: OLD_KEY}
    effect = alice.intent(claim=True)
    done = alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    settings.LEDGER_KEYS = {1: OLD_KEY, 2: NEW_KEY}
    again = alice.intent(expect=200)
    assert (again["id"], again["idempotency_key"]) == (effect["id"], effect["idempotency_key"])
    assert alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1") == done
    alice.intent(request={"amount": "99.00", "currency": "EUR"}, expect=409)


def test_a_legacy_untagged_outcome_digest_is_still_recognised(alice, settings):
    settings.LEDGER_KEYS = {1: OLD_KEY}
    effect = alice.intent(claim=True)
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")
    stored = Effect.objects.get(pk=effect["id"])
    Effect.objects.filter(pk=stored.pk).update(outcome_digest=stored.outcome_digest.split(":")[1])
    settings.LEDGER_KEYS = {1: OLD_KEY, 2: NEW_KEY}
    alice.outcome(effect["id"], effect["lease_token"], provider_ref="ch_1")


def _deliver(body: dict, secret: str):
    raw = json.dumps(body).encode()
    return Client().post(
        "/api/v1/webhooks/sandbox-pay",
        data=raw,
        content_type="application/json",
        headers={"X-Ledger-Signature": sign(secret, int(time.time()), raw)},
    )


def test_during_a_webhook_secret_rotation_either_secret_signs(alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"sandbox-pay": "new-webhook-secret-0123456789"}
    settings.LEDGER_WEBHOOK_OLD_SECRETS = {"sandbox-pay": "old-webhook-secret-0123456789"}
    first, second = alice.intent("run-1", claim=True), alice.intent("run-2", claim=True)
    for effect in (first, second):
        alice.outcome(effect["id"], effect["lease_token"], "awaiting_confirmation")
    for effect, secret in ((first, "old"), (second, "new")):
        body = {"idempotency_key": effect["idempotency_key"], "status": "confirmed"}
        response = _deliver(body, f"{secret}-webhook-secret-0123456789")
        assert response.status_code == 200, response.content
    third = alice.intent("run-3", claim=True)
    alice.outcome(third["id"], third["lease_token"], "awaiting_confirmation")
    body = {"idempotency_key": third["idempotency_key"], "status": "confirmed"}
    assert_error(_deliver(body, "some-other-secret-0123456789"), 401, "unauthorized")
    # Once the rotation is over, the old secret signs nothing.
    settings.LEDGER_WEBHOOK_OLD_SECRETS = {}
    assert_error(_deliver(body, "old-webhook-secret-0123456789"), 401, "unauthorized")


def _settings_with(webhook_secrets: str) -> subprocess.CompletedProcess[str]:
    code = (
        "from django.conf import settings; "
        "print(settings.LEDGER_WEBHOOK_SECRETS, settings.LEDGER_WEBHOOK_OLD_SECRETS)"
    )
    return subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env={**os.environ, "LEDGER_WEBHOOK_SECRETS": webhook_secrets},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_webhook_secrets_setting_takes_two_secrets_per_provider_and_no_more():
    two = _settings_with("sandbox-pay:old-secret,other:o,sandbox-pay:new-secret")
    assert two.returncode == 0, two.stderr
    assert two.stdout.strip().splitlines()[-1] == (
        "{'sandbox-pay': 'new-secret', 'other': 'o'} {'sandbox-pay': 'old-secret'}"
    )
    three = _settings_with("p:a,p:b,p:c")
    assert three.returncode != 0
    assert "LEDGER_WEBHOOK_SECRETS" in three.stderr
