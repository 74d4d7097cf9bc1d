"""The SendGrid adapter against the fake SendGrid, through the `sendgrid` library: what the
fake answers is what the library parses; the Email Activity lookup finds, fails, doubts and
never proves absence; loadtools refuses what the adapter cannot back."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from python_http_client.exceptions import BadRequestsError, UnauthorizedError
from sendgrid import SendGridAPIClient

from devstack.providers.sendgrid import caller
from ledger.models import Effect, ReviewItem
from ledger.policy.toolfile import ToolFileError
from reconcilers.providers import adapter_for
from reconcilers.providers.checks import check_tool
from reconcilers.reconcile import process_one
from tests.providers.sendgrid_support import declare, request, sent

# The fixtures: sendgrid (the fake), email_tool (declared against it), make_email.
pytest_plugins = ["tests.providers.sendgrid_fixtures"]
pytestmark = pytest.mark.django_db


def lookup(tool, effect):
    return adapter_for(tool).lookup(effect)


def due(effect: Effect) -> Effect:
    Effect.objects.filter(id=effect.id).update(next_check_at=timezone.now() - timedelta(seconds=1))
    return effect


# --- the fake speaks SendGrid ----------------------------------------------------------------


def test_the_library_sends_searches_and_reads_errors_from_the_fake(sendgrid):
    client = SendGridAPIClient(api_key=caller.API_KEY, host=sendgrid.url)
    mail = caller.mail({"idempotency_key": "k-1", "id": "e-1"}, request())

    answer = client.send(mail)
    assert answer.status_code == 202 and answer.body == b""
    message_id = answer.headers["X-Message-Id"]

    search = client.client.messages.get(query_params={"query": "unique_args['ledger_key']=\"k-1\""})
    [listed] = search.to_dict["messages"]
    assert listed["msg_id"].split(".")[0] == message_id and listed["status"] == "delivered"
    details = client.client.messages._(listed["msg_id"]).get().to_dict
    assert details["events"][0]["event_name"] == "processed"

    with pytest.raises(BadRequestsError) as refused:
        client.client.mail.send.post(request_body={**mail.get(), "subject": ""})
    assert refused.value.to_dict["errors"][0]["field"] == "subject"
    with pytest.raises(UnauthorizedError):
        SendGridAPIClient(api_key="SG.wrong", host=sendgrid.url).send(mail)
    assert len(sendgrid.transactions()) == 1


# --- found --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("to", "status"),
    [("ada@example.com", "confirmed"), ("bounce@example.com", "confirmed"),
     ("drop@example.com", "failed")],
    ids=["delivered", "bounced-was-sent", "dropped-never-sent"],
)  # fmt: skip
def test_a_message_found_settles_the_effect_as_sendgrid_saw_it(
    sendgrid, email_tool, make_email, to, status
):
    effect = due(make_email("unknown", request=request(to=to)))
    outcome = sent(sendgrid, effect)

    answer = lookup(email_tool, effect)
    assert (answer.outcome, answer.status, answer.listed) == ("found", status, False)
    assert answer.provider_ref == outcome["provider_ref"]  # the request's X-Message-Id

    assert process_one(effect.id)
    effect.refresh_from_db()
    assert (effect.status, effect.provider_ref) == (status, outcome["provider_ref"])


def test_a_message_to_someone_else_under_our_key_is_a_mismatch(sendgrid, email_tool, make_email):
    effect = make_email("unknown")
    sent(sendgrid, effect, **request(to="eve@example.com"))

    answer = lookup(email_tool, effect)
    assert (answer.outcome, answer.mismatches) == ("found", ("to",))


def test_two_requests_under_one_key_are_a_duplicate(sendgrid, email_tool, make_email):
    effect = make_email("unknown")
    refs = sorted(sent(sendgrid, effect)["provider_ref"] for _ in range(2))

    answer = lookup(email_tool, effect)
    assert (answer.outcome, list(answer.refs)) == ("duplicate", refs)


# --- not found proves nothing ----------------------------------------------------------------


def test_a_message_the_activity_does_not_show_yet_goes_to_a_person(
    start_sandbox, monkeypatch, tmp_path, tools, make_email
):
    monkeypatch.setenv(caller.API_KEY_ENV, caller.API_KEY)
    slow = start_sandbox("sendgrid", "--activity-lag", "60")
    tool = declare(tmp_path, slow.url)
    effect = due(make_email("unknown"))
    sent(slow, effect)

    answer = lookup(tool, effect)
    assert (answer.outcome, answer.listed) == ("not_found", False)

    assert process_one(effect.id)
    effect.refresh_from_db()
    assert effect.status == "unknown" and effect.next_check_at is None
    assert ReviewItem.objects.filter(effect=effect, reason="not_found_unproven").exists()
    assert len(slow.transactions()) == 1  # nobody sent it again


def test_an_effect_never_sent_is_not_found_and_not_proven_absent(email_tool, make_email):
    answer = lookup(email_tool, make_email("unknown"))
    assert (answer.outcome, answer.listed) == ("not_found", False)


# --- inconclusive ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "faults",
    [{"fail5xx": 503}, {"garbage": True}, {"wrong_types": True}, {"drop": True}],
    ids=["5xx", "html", "unexpected-shape", "no-answer"],
)
def test_a_provider_fault_is_inconclusive(sendgrid, email_tool, make_email, faults):
    effect = make_email("unknown")
    sent(sendgrid, effect)
    sendgrid.set_faults(methods=("GET",), **faults)

    assert lookup(email_tool, effect).outcome == "inconclusive"


def test_a_search_that_does_not_answer_in_time_is_inconclusive(sendgrid, email_tool, make_email):
    email_tool.reconciler_config = {**email_tool.reconciler_config, "timeout": 0.5}
    email_tool.save()
    effect = make_email("unknown")
    sendgrid.set_faults(methods=("GET",), hang=2)

    answer = lookup(email_tool, effect)
    assert answer.outcome == "inconclusive" and "unreachable" in answer.detail


@pytest.mark.parametrize(
    ("knob", "detail"),
    [({"truncated": 1}, "not JSON"), ({"truncated_details": 1}, "not JSON"),
     ({"unfiltered": True}, "does not carry our key")],
    ids=["truncated-search", "truncated-details", "query-ignored"],
)  # fmt: skip
def test_a_cut_or_unfiltered_answer_is_inconclusive(sendgrid, email_tool, make_email, knob, detail):
    sent(sendgrid, make_email("unknown"))  # another effect's, sent first
    effect = make_email("unknown")
    sent(sendgrid, effect)
    sendgrid._sandbox("POST", "activity", knob)

    answer = lookup(email_tool, effect)
    assert answer.outcome == "inconclusive" and detail in answer.detail


def test_a_429_says_when_to_ask_again(sendgrid, email_tool, make_email):
    effect = make_email("unknown")
    sendgrid._sandbox("POST", "activity", {"rate_limited": 1, "reset_in": 40})

    answer = lookup(email_tool, effect)
    assert answer.outcome == "inconclusive" and "429" in answer.detail
    assert 35 <= answer.retry_after <= 41  # from X-RateLimit-Reset, a Unix time
    assert lookup(email_tool, effect).outcome == "not_found"  # asked again, answered


def test_a_full_page_proves_nothing(sendgrid, email_tool, make_email):
    effect = make_email("unknown")
    for _ in range(10):
        sent(sendgrid, effect)

    answer = lookup(email_tool, effect)
    assert answer.outcome == "inconclusive" and "cut" in answer.detail


@pytest.mark.parametrize("key", ["", "SG.wrong"], ids=["no-key", "wrong-key"])
def test_without_a_working_key_the_lookup_is_inconclusive(
    sendgrid, email_tool, make_email, monkeypatch, key
):
    monkeypatch.setenv(caller.API_KEY_ENV, key)
    assert lookup(email_tool, make_email("unknown")).outcome == "inconclusive"


# --- what loadtools refuses -------------------------------------------------------------------

ABSENCE = {
    "search_lag": "10m",
    "settle_after": "11m",
    "lookup_horizon": "30d",
    "lookup_proves_absence": True,
}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (ABSENCE, "lookup_proves_absence: the sendgrid adapter, as configured, cannot prove"),
        ({"honours_key": True}, "honours_key: the sendgrid adapter speaks to a provider that"),
        ({"lookup_horizon": "60d"}, "lookup_horizon: 60d is further back than the provider"),
        (
            {"reconciler_config": {"base_url": "http://127.0.0.1:9"}},
            "reconciler_config: api_key_env must name",
        ),
        (
            {"reconciler_config": {"api_key": "SG.secret", "api_key_env": "X"}},
            "reconciler_config.api_key: a secret is never written here",
        ),
    ],
    ids=["proves-absence", "honours-key", "horizon", "no-key-variable", "inline-secret"],
)
def test_loadtools_refuses_what_sendgrid_cannot_back(tmp_path, tools, changes, message):
    with pytest.raises(ToolFileError, match=message):
        declare(tmp_path, "http://127.0.0.1:9", **changes)


def test_the_crash_tests_tool_is_accepted_as_it_is(tmp_path, tools):
    tool = declare(tmp_path, "http://127.0.0.1:9")
    fields = {"reconciler": tool.reconciler, "reconciler_config": tool.reconciler_config}
    assert check_tool(tool.name, {**fields, "has_lookup": True}) == ""
    assert not tool.honours_key and not tool.lookup_proves_absence
