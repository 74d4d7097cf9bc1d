"""What the crash test sends to the fake Slack, through the official `slack_sdk`: one message
per claimed effect, posted with `chat.postMessage`, carrying the effect's identity as the
message's metadata (Slack keeps no idempotency keys).

`send` answers with the outcome the worker reports: confirmed with the message's `ts` (in
Slack's permalink form: "p" and its digits) on an ok answer, failed on an error Slack
documents as the message not having been posted (the channel, the token, the text or the
metadata refused), and unknown for everything else: a lost answer, a timeout, a 5xx, a rate
limit, an internal error ("It's possible some aspect of the operation succeeded"). It speaks
only HTTP and never imports Django.
"""

from __future__ import annotations

import os
from typing import Any

# The ledger's lookups read the token from TOKEN_ENV (the tool's token_env): set it to TOKEN,
# the fake's default token, in the ledger's environment.
TOKEN_ENV = "SLACK_BOT_TOKEN"
TOKEN = "xoxb-fake-slack-bot-token"
ENV = {TOKEN_ENV: TOKEN}
CHANNEL = "C0LEDGER01"  # the fake's default channel
EVENT_TYPE = "effect_ledger_effect"  # reconcilers.providers.slack.history.EVENT_TYPE
TIMEOUT = 2  # seconds: the tool's call_timeout

# The crash test's tool for this provider, as a tools.toml table. Slack states no bound on
# how soon a message shows in history: the adapter declares a minute, so a not-found proves
# absence only 62 s (call_timeout + search_lag) after the last dispatch.
TOOL: dict[str, Any] = {
    "preset": "lookup",
    "description": "Post a message to a Slack channel (no idempotency keys; found by metadata)",
    "reconciler": "slack",
    "reconciler_config": {
        "base_url": "{provider_url}/api/",
        "channel": CHANNEL,
        "token_env": TOKEN_ENV,
        "timeout": 3,
    },
    "webhook_provider": "slack",
    "call_timeout": "2s",
    "search_lag": "1m",
    "settle_after": "62s",
    "lookup_proves_absence": True,
    "lookup_horizon": "1h",
}
# The fake's history shows a post in the transaction that answers it: against the fake, a
# not-found proves absence once the lease ended and 3 s passed (below the minute a tools file
# must declare for Slack).
FAKE_TIMING = {"search_lag": 0, "settle_after": 3}

# Errors of chat.postMessage after which the message was not posted: the request was refused
# as a whole (its channel, its token, its arguments).
NOT_POSTED = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "msg_too_long",
        "msg_blocks_too_long",
        "no_text",
        "too_many_attachments",
        "invalid_blocks",
        "invalid_blocks_format",
        "invalid_metadata_format",
        "invalid_metadata_schema",
        "metadata_too_large",
        "metadata_must_be_sent_from_app",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "as_user_not_supported",
        "ekm_access_denied",
        "not_authed",
        "invalid_auth",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "not_allowed_token_type",
        "team_access_not_granted",
        "invalid_arguments",
        "invalid_arg_name",
        "invalid_charset",
        "invalid_form_data",
        "invalid_post_type",
        "missing_post_type",
    }
)


def client(provider_url: str, fault: str = "") -> Any:
    """The SDK's client for the fake, without the SDK's retries: a post it repeated on a lost
    connection would be a second message."""
    from slack_sdk import WebClient

    headers = {"X-Sandbox-Fault": fault} if fault else {}
    token = os.environ.get(TOKEN_ENV) or TOKEN
    return WebClient(
        token=token,
        base_url=f"{provider_url.rstrip('/')}/api/",
        timeout=TIMEOUT,
        headers=headers,
        retry_handlers=[],
    )


def request_for(workflow: dict[str, Any]) -> dict[str, Any]:
    """The message a crash-test workflow posts."""
    return {"channel": CHANNEL, "text": f"Deploy {workflow['run_id']} finished."}


def warm(provider_url: str) -> None:
    """slack_sdk loaded and a client built: what `send` needs, before forking."""
    import slack_sdk.errors  # noqa: F401

    client(provider_url)


def send(provider_url: str, effect: dict[str, Any], request: dict[str, Any], fault: str) -> dict:
    """Post the effect's message once; `fault` ("", "hang=1", "drop") is applied by the fake to
    this one call. Returns {"status", "provider_ref", "response"} for POST /outcome."""
    from slack_sdk.errors import SlackApiError

    metadata = {
        "event_type": EVENT_TYPE,
        "event_payload": {
            "ledger_key": effect["idempotency_key"],
            "ledger_effect": str(effect["id"]),
        },
    }
    try:
        answer = client(provider_url, fault).chat_postMessage(
            channel=str(request.get("channel") or CHANNEL),
            text=str(request.get("text") or "-"),
            metadata=metadata,
        )
    except SlackApiError as exc:
        status, data = exc.response.status_code, exc.response.data
        error = data.get("error") if isinstance(data, dict) else None
        posted = not (status == 200 and error in NOT_POSTED)
        return {
            "status": "unknown" if posted else "failed",
            "provider_ref": "",
            "response": {"status": status, "error": error if isinstance(error, str) else None},
        }
    except Exception as exc:  # the request may have left: a lost answer is unknown
        return {"status": "unknown", "provider_ref": "", "response": {"error": type(exc).__name__}}
    ts = answer.get("ts")
    if not isinstance(ts, str) or not ts:
        return {"status": "unknown", "provider_ref": "", "response": {"body": "no ts"}}
    ref = "p" + ts.replace(".", "")  # reconcilers.providers.slack.history.ref
    return {
        "status": "confirmed",
        "provider_ref": ref,
        "response": {"channel": answer.get("channel"), "ref": ref},
    }


def records(provider_url: str) -> dict[str, int]:
    """How many messages the fake holds per effect idempotency key."""
    import httpx

    with httpx.Client(trust_env=False, timeout=5) as http:
        posted = http.get(f"{provider_url.rstrip('/')}/_sandbox/transactions").json()["data"]
    counts: dict[str, int] = {}
    for message in posted:
        metadata = message.get("metadata") or {}
        key = (metadata.get("event_payload") or {}).get("ledger_key")
        if metadata.get("event_type") == EVENT_TYPE and isinstance(key, str):
            counts[key] = counts.get(key, 0) + 1
    return counts
