"""The ledger's calls to Slack while it answers a press: `views.open` (a modal asking what the
page asks), `users.info` (a user's email, in a workspace trusted for it) and the press's
`response_url` (the message updated in place, or an answer only the presser sees).

Slack waits three seconds for the answer to a press, so each call gets
`LEDGER_SLACK_TIMEOUT` (2 s by default) and a failure is reported as `SlackCallFailed`, never
retried here. The Web API is at `LEDGER_SLACK_API_URL`; a `response_url` is used only when it
starts with `LEDGER_SLACK_RESPONSE_URL` (Slack's own hooks address), so a payload can never
make the ledger post elsewhere. No proxy from the environment is used.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from django.conf import settings

log = logging.getLogger("reviews.remote.slack")


class SlackCallFailed(Exception):
    """Slack did not take the call (unreachable, not a 2xx, or `ok: false`)."""


def _client() -> httpx.Client:
    return httpx.Client(
        timeout=settings.LEDGER_SLACK_TIMEOUT, trust_env=False, follow_redirects=False
    )


def _method(name: str, *, json: dict[str, Any] | None = None, form: dict[str, str] | None = None):
    """One Web API method, with the bot token; its answer when Slack says `ok`."""
    token = settings.LEDGER_SLACK_BOT_TOKEN
    if not token:
        raise SlackCallFailed(f"{name}: no LEDGER_SLACK_BOT_TOKEN is configured")
    url = settings.LEDGER_SLACK_API_URL.rstrip("/") + "/" + name
    headers = {"Authorization": f"Bearer {token}"}
    try:
        with _client() as client:
            response = client.post(url, json=json, data=form, headers=headers)
        answer = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise SlackCallFailed(f"{name}: {type(exc).__name__}: {exc}") from exc
    if not response.is_success or not isinstance(answer, dict) or answer.get("ok") is not True:
        error = answer.get("error") if isinstance(answer, dict) else None
        raise SlackCallFailed(f"{name}: HTTP {response.status_code}, {error or 'not ok'}")
    return answer


def open_modal(trigger_id: str, view: dict[str, Any]) -> str:
    """Open `view` for the person whose press gave `trigger_id`; the view's id."""
    answer = _method("views.open", json={"trigger_id": trigger_id, "view": view})
    return str((answer.get("view") or {}).get("id") or "")


def profile_email(team_id: str, slack_user: str) -> str:
    """The email Slack holds for a member of `team_id`, or "" (a bot, a deleted user, another
    workspace's user, an address Slack has not confirmed, or no `users:read.email` scope)."""
    answer = _method("users.info", form={"user": slack_user})
    user = answer.get("user")
    if not isinstance(user, dict) or user.get("team_id") != team_id:
        return ""
    if user.get("deleted") or user.get("is_bot") or user.get("is_email_confirmed") is False:
        return ""
    email = (user.get("profile") or {}).get("email")
    return email.strip() if isinstance(email, str) else ""


def respond(response_url: Any, message: dict[str, Any]) -> bool:
    """Post `message` to a press's `response_url` (Slack's `replace_original` updates the
    message in place; `response_type: ephemeral` shows it to the presser alone). Whether Slack
    took it; a failure is logged, as the press has been answered either way."""
    prefix = settings.LEDGER_SLACK_RESPONSE_URL
    if not isinstance(response_url, str) or not prefix or not response_url.startswith(prefix):
        log.warning("slack: a response_url outside %s was not used", prefix)
        return False
    try:
        with _client() as client:
            response = client.post(response_url, json=message)
    except httpx.HTTPError as exc:
        log.warning("slack: response_url not reached: %s: %s", type(exc).__name__, exc)
        return False
    if not response.is_success:
        log.warning("slack: response_url answered HTTP %s", response.status_code)
    return response.is_success
