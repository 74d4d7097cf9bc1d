"""The Slack adapter against the fake Slack, through `slack_sdk`: what the fake answers is what
the SDK parses; the history lookup finds, counts two as a duplicate, proves absence only from a
window read to its last page, and doubts everything else; list_window lists our messages;
loadtools refuses what the adapter cannot back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.utils import timezone
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.models.metadata import Metadata
from slack_sdk.web import SlackResponse

from devstack.providers.slack import caller
from ledger.models import Effect
from ledger.policy.toolfile import ToolFileError
from reconcilers.providers import adapter_for
from reconcilers.providers.checks import check_tool
from reconcilers.providers.outcomes import ListingBroken
from reconcilers.providers.slack import history
from reconcilers.reconcile import process_one
from tests.providers.slack_support import OTHER_CHANNEL, declare, post, rate_limit

# The fixtures: slack (the fake), slack_tool (declared against it), make_message.
pytest_plugins = ["tests.providers.slack_fixtures"]
pytestmark = pytest.mark.django_db


def lookup(tool, effect):
    return adapter_for(tool).lookup(effect)


def sdk(slack) -> WebClient:
    return caller.client(slack.url)


# --- the fake speaks Slack --------------------------------------------------------------------


def test_the_sdk_posts_and_pages_through_the_fakes_history(slack):
    posted = [
        sdk(slack).chat_postMessage(
            channel=caller.CHANNEL,
            text=f"message {n}",
            metadata=Metadata(
                "effect_ledger_effect", {"ledger_key": f"k{n}", "ledger_effect": "e"}
            ),
        )
        for n in range(5)
    ]
    pages = sdk(slack).conversations_history(
        channel=caller.CHANNEL, limit=2, include_all_metadata=True
    )

    # The SDK's own paging follows response_metadata.next_cursor to the last page.
    texts = [message["text"] for page in pages for message in page["messages"]]
    assert texts == [f"message {n}" for n in reversed(range(5))]  # newest first, as Slack
    assert all(answer["ok"] and answer["message"]["metadata"] for answer in posted)
    assert Metadata(**posted[0]["message"]["metadata"]).event_payload["ledger_key"] == "k0"
    stamps = [answer["ts"] for answer in posted]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5


def test_the_fakes_raw_answers_are_what_the_sdks_response_class_takes(slack):
    raw = httpx.post(
        f"{slack.url}/api/chat.postMessage",
        data={"channel": caller.CHANNEL, "text": "a form post", "token": caller.TOKEN},
    )
    history_page = httpx.post(
        f"{slack.url}/api/conversations.history",
        json={"channel": caller.CHANNEL},
        headers={"Authorization": f"Bearer {caller.TOKEN}"},
    )
    refused = httpx.post(f"{slack.url}/api/chat.postMessage", data={"channel": caller.CHANNEL})

    for answer in (raw, history_page):
        parsed = SlackResponse(
            client=None,
            http_verb="POST",
            api_url=str(answer.url),
            req_args={},
            data=answer.json(),
            headers=dict(answer.headers),
            status_code=answer.status_code,
        ).validate()
        assert parsed["ok"] is True
    assert history_page.json()["messages"][0]["ts"] == raw.json()["ts"]
    assert "metadata" not in history_page.json()["messages"][0]
    assert (refused.status_code, refused.json()) == (200, {"ok": False, "error": "not_authed"})


def test_the_sdk_raises_what_slack_refuses_and_the_fake_keeps_no_keys(slack):
    with pytest.raises(SlackApiError) as refused:
        sdk(slack).chat_postMessage(channel="C0NOSUCH01", text="lost")
    rate_limit(slack, count=1, retry_after=7)
    with pytest.raises(SlackApiError) as limited:
        sdk(slack).conversations_history(channel=caller.CHANNEL)
    effect = {"idempotency_key": "el_same", "id": "e1"}
    twice = [caller.send(slack.url, effect, {"text": "hi"}, "") for _ in range(2)]

    assert refused.value.response["error"] == "channel_not_found"
    assert limited.value.response.status_code == 429
    assert limited.value.response.headers["Retry-After"] == "7"
    assert [answer["status"] for answer in twice] == ["confirmed", "confirmed"]
    assert caller.records(slack.url) == {"el_same": 2}


# --- lookup -----------------------------------------------------------------------------------


def test_a_posted_message_is_found_by_its_metadata_and_settles_the_effect(
    slack, slack_tool, make_message
):
    effect = make_message("unknown", next_check_at=timezone.now() - timedelta(seconds=1))
    sent = post(slack, effect)

    answer = lookup(slack_tool, effect)
    assert (answer.outcome, answer.status, answer.listed) == ("found", "confirmed", True)
    assert answer.provider_ref == sent["provider_ref"] and not answer.mismatches
    assert process_one(effect.id)
    stored = Effect.objects.get(pk=effect.pk)
    assert (stored.status, stored.provider_ref) == ("confirmed", sent["provider_ref"])


def test_not_found_is_listed_only_after_every_page_was_read(
    slack, slack_tool, make_message, monkeypatch
):
    monkeypatch.setattr(history, "PAGE", 2)
    effect = make_message("unknown")
    for _ in range(5):
        post(slack, make_message("unknown"))  # other effects' messages: three pages

    answer = lookup(slack_tool, effect)
    assert (answer.outcome, answer.listed) == ("not_found", True)

    rate_limit(slack, count=1, retry_after=11, after=2)  # the third page is refused
    cut = lookup(slack_tool, effect)
    assert cut.outcome == "inconclusive" and cut.retry_after == 11.0
    assert "ratelimited" in cut.detail


def test_a_message_on_a_later_page_is_found(slack, slack_tool, make_message, monkeypatch):
    monkeypatch.setattr(history, "PAGE", 2)
    effect = make_message("unknown")
    first = post(slack, effect)
    for _ in range(4):
        post(slack, make_message("unknown"))

    assert lookup(slack_tool, effect).provider_ref == first["provider_ref"]


def test_two_messages_under_one_key_are_a_duplicate(slack, slack_tool, make_message):
    effect = make_message("unknown")
    refs = [post(slack, effect)["provider_ref"] for _ in range(2)]

    answer = lookup(slack_tool, effect)
    assert (answer.outcome, list(answer.refs)) == ("duplicate", refs)


def test_our_key_under_another_effects_id_is_a_mismatch(slack, slack_tool, make_message):
    effect = make_message("unknown")
    post(slack, effect, as_effect="00000000-0000-0000-0000-000000000000")

    answer = lookup(slack_tool, effect)
    assert (answer.outcome, answer.mismatches) == ("found", ("ledger_effect",))


def test_a_message_in_another_channel_is_not_ours_to_find(slack, slack_tool, make_message):
    effect = make_message("unknown")
    post(slack, effect, channel=OTHER_CHANNEL, text="elsewhere")

    assert lookup(slack_tool, effect).outcome == "not_found"
    assert caller.records(slack.url) == {effect.idempotency_key: 1}


@pytest.mark.parametrize(
    "faults",
    [{"fail5xx": 503}, {"garbage": True}, {"wrong_types": True}, {"drop": True}],
    ids=["5xx", "html", "unexpected-shape", "no-answer"],
)
def test_a_provider_fault_is_inconclusive(slack, slack_tool, make_message, faults):
    effect = make_message("unknown")
    post(slack, effect)
    slack.set_faults(**faults)

    answer = lookup(slack_tool, effect)
    assert answer.outcome == "inconclusive" and not answer.listed


def test_a_history_that_does_not_answer_in_time_is_inconclusive(slack, slack_tool, make_message):
    slack_tool.reconciler_config = {**slack_tool.reconciler_config, "timeout": 0.5}
    slack_tool.save()
    slack.set_faults(hang=2)

    answer = lookup(slack_tool, make_message("unknown"))
    assert answer.outcome == "inconclusive" and "did not answer" in answer.detail


def test_a_429_says_when_to_ask_again(slack, slack_tool, make_message):
    effect = make_message("unknown")
    rate_limit(slack, count=1, retry_after=40)

    answer = lookup(slack_tool, effect)
    assert (answer.outcome, answer.retry_after) == ("inconclusive", 40.0)
    assert lookup(slack_tool, effect).outcome == "not_found"  # asked again, answered


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"has_more": True}, "gives no cursor"),
        ({"messages": None}, "no list of messages"),
        ({"ok": "yes"}, "not an ok history page"),
        ({"has_more": "false"}, "whether there is more"),
    ],
    ids=["truncated", "no-messages", "not-ok", "mistyped"],
)
def test_a_page_short_of_slacks_shape_is_no_listing(slack, change, detail):
    caller.send(slack.url, {"idempotency_key": "el_x", "id": "e1"}, {"text": "hi"}, "")
    page = sdk(slack).conversations_history(channel=caller.CHANNEL, include_all_metadata=True)
    window = (history.timestamp("0"), history.timestamp("9999999999"))

    assert history._read(page.data, *window)[1] == ""  # the page as the fake sent it: complete
    with pytest.raises(history.Unread, match=detail):
        history._read({**page.data, **change}, *window)
    with pytest.raises(history.Unread, match="outside the window"):
        history._read(page.data, history.timestamp("0"), history.timestamp("1"))


@pytest.mark.parametrize(
    ("problem", "detail"),
    [("token", "environment variable is not set"), ("wrong-token", "invalid_auth"),
     ("channel", "channel_not_found")],
)  # fmt: skip
def test_slacks_refusals_are_inconclusive_with_the_error(
    slack, slack_tool, make_message, monkeypatch, problem, detail
):
    if problem == "channel":
        slack_tool.reconciler_config = {**slack_tool.reconciler_config, "channel": "C0NOSUCH01"}
        slack_tool.save()
    tokens = {"token": "", "wrong-token": "xoxb-wrong"}
    monkeypatch.setenv(caller.TOKEN_ENV, tokens.get(problem, caller.TOKEN))

    answer = lookup(slack_tool, make_message("unknown"))
    assert answer.outcome == "inconclusive" and detail in answer.detail


def test_a_message_marked_as_ours_without_a_payload_is_no_proof_of_absence(
    start_sandbox, tmp_path, tools, make_message, monkeypatch
):
    monkeypatch.setenv(caller.TOKEN_ENV, caller.TOKEN)
    fake = start_sandbox("slack", "--bot-token", caller.TOKEN)
    tool = declare(tmp_path, fake.url)
    effect = make_message("unknown")
    post(fake, effect)
    # Read without include_all_metadata, Slack strips an undeclared type's payload.
    shown = caller.client(fake.url).conversations_history(channel=caller.CHANNEL)

    assert shown["messages"][0]["metadata"] == {
        "event_type": caller.EVENT_TYPE,
        "event_payload": {},
    }
    assert lookup(tool, effect).outcome == "found"  # the lookup asks for all metadata
    with pytest.raises(ValueError, match="carries no key"):
        history.ours(shown["messages"][0])


# --- list_window ------------------------------------------------------------------------------


def test_list_window_lists_every_message_of_ours_in_the_window(slack, slack_tool, make_message):
    start = datetime.now(UTC) - timedelta(seconds=1)
    first, second = make_message("unknown"), make_message("unknown")
    refs = [post(slack, first)["provider_ref"], post(slack, second)["provider_ref"]]
    sdk(slack).chat_postMessage(channel=caller.CHANNEL, text="a person's message")
    end = datetime.now(UTC) + timedelta(seconds=1)

    listing = adapter_for(slack_tool).list_window(start, end)
    records = list(listing.records)  # streamed: the pages are fetched as it is read
    before = adapter_for(slack_tool).list_window(start - timedelta(hours=1), start)
    earlier = list(before.records)
    slack.set_faults(fail5xx=503)
    failed = adapter_for(slack_tool).list_window(start, end)

    assert listing.complete
    assert [(r.provider_ref, r.reference) for r in records] == [
        (refs[0], first.idempotency_key),
        (refs[1], second.idempotency_key),
    ]
    assert all(start <= r.occurred_at < end for r in records)
    assert before.complete and earlier == []
    # A page Slack does not hand over stops the listing: nothing in the window is concluded.
    assert failed.complete
    with pytest.raises(ListingBroken, match="503"):
        list(failed.records)


def test_a_windows_pages_are_fetched_as_the_records_before_them_are_read(
    slack, slack_tool, make_message, monkeypatch
):
    """The listing holds one page at a time: the first page is read before Slack refuses, and
    the refusal shows only when the next page is wanted."""
    monkeypatch.setattr(history, "PAGE", 2)
    start = datetime.now(UTC) - timedelta(seconds=1)
    refs = [post(slack, make_message("unknown"))["provider_ref"] for _ in range(5)]
    end = datetime.now(UTC) + timedelta(seconds=1)

    listing = adapter_for(slack_tool).list_window(start, end)
    records = iter(listing.records)
    first_page = [next(records).provider_ref, next(records).provider_ref]
    rate_limit(slack, count=1, retry_after=20)

    assert listing.complete and first_page == refs[3:]  # the newest page, oldest first
    with pytest.raises(ListingBroken, match="ratelimited"):
        next(records)
    whole = adapter_for(slack_tool).list_window(start, end)  # asked again, answered
    assert sorted(r.provider_ref for r in whole.records) == sorted(refs)


def test_a_window_longer_than_its_page_bound_is_not_complete(
    slack, slack_tool, make_message, monkeypatch
):
    monkeypatch.setattr(history, "PAGE", 2)
    start = datetime.now(UTC) - timedelta(seconds=1)
    for _ in range(5):
        post(slack, make_message("unknown"))  # three pages
    end = datetime.now(UTC) + timedelta(seconds=1)
    slack_tool.reconciler_config = {**slack_tool.reconciler_config, "window_max_pages": 2}
    slack_tool.save()

    listing = adapter_for(slack_tool).list_window(start, end)
    records = iter(listing.records)
    first_pages = [next(records) for _ in range(4)]

    assert listing.complete and len(first_pages) == 4
    with pytest.raises(ListingBroken, match="more than 2 pages of 2 messages"):
        next(records)


# --- what loadtools refuses -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"honours_key": True}, "honours_key: the slack adapter speaks to a provider that keeps"),
        ({"search_lag": "30s"}, "search_lag: 30s is shorter than the provider's \\(1m\\)"),
        ({"lookup_horizon": "120d"}, "lookup_horizon: 120d is further back than the provider"),
        (
            {"reconciler_config": {"channel": "#general", "token_env": "T"}},
            "reconciler_config: channel must be a Slack channel ID",
        ),
        (
            {"reconciler_config": {"channel": "C0LEDGER01"}},
            "reconciler_config: token_env must name the environment variable",
        ),
        (
            {"reconciler_config": {"channel": "C0LEDGER01", "token": "xoxb-1", "token_env": "T"}},
            "reconciler_config.token: a secret is never written here",
        ),
        (
            {"reconciler_config": {"channel": "C0LEDGER01", "token_env": "T", "chanel": "C1"}},
            "reconciler_config: chanel is not a setting of the slack adapter",
        ),
        (
            {"reconciler_config": {"channel": "C0LEDGER01", "token_env": "T",
                                   "window_max_pages": 0}},
            "reconciler_config: window_max_pages must be a whole number from 1 to 100000",
        ),
    ],
    ids=["honours-key", "search-lag", "horizon", "channel-name", "no-token", "inline-token",
         "unknown-key", "window-pages"],
)  # fmt: skip
def test_loadtools_refuses_what_slack_cannot_back(tmp_path, tools, changes, message):
    with pytest.raises(ToolFileError, match=message):
        declare(tmp_path, "http://127.0.0.1:9", **changes)


def test_the_crash_tests_tool_is_accepted_as_it_is(tmp_path, tools):
    tool = declare(tmp_path, "http://127.0.0.1:9")
    modes = declare(
        tmp_path,
        "http://127.0.0.1:9",
        reconciler_config={"channel": "C0LEDGER01", "token_env": {"test": "A", "live": "B"}},
    )
    fields = {"reconciler": tool.reconciler, "reconciler_config": tool.reconciler_config}
    assert check_tool(tool.name, {**fields, "has_lookup": True}) == ""
    assert not tool.honours_key and tool.lookup_proves_absence
    assert tool.search_lag == timedelta(minutes=1)
    assert modes.reconciler_config["token_env"] == {"test": "A", "live": "B"}
