"""The Slack adapter: did the message of this effect land in the channel?

Configured per tool, e.g. in tools.toml:

    reconciler = "slack"
    reconciler_config = { channel = "C0123456789",
                          token_env = { test = "SLACK_TEST_BOT_TOKEN", live = "SLACK_BOT_TOKEN" } }

`channel` is the channel's ID (history is read by ID, not by name), `token_env` names the
variable holding the bot token (scopes `chat:write` and the channel's `*:history`),
`base_url` defaults to Slack's Web API and `timeout` to 5 seconds.

The lookup reads the channel's history from the effect's creation (less `CLOCK_ALLOWANCE`)
to now (plus it), every page, and looks for messages carrying the effect's key in their
metadata: one is found (its `ts`, in Slack's permalink form, is the provider's reference),
two or more are a duplicate, none in a complete reading is a listed not-found. What such a
not-found cannot see (a deleted message, a thread reply, history beyond the workspace's
retention) and why the adapter declares a search lag: docs/providers/slack.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from ledger.models import Effect
from reconcilers.providers.base import AdapterBase, Backing, secret_variable
from reconcilers.providers.outcomes import (
    Listing,
    Lookup,
    Record,
    duplicate,
    found,
    inconclusive,
    not_found,
)
from reconcilers.providers.slack import history
from reconcilers.providers.slack.events import SlackEvents
from reconcilers.providers.slack.history import Ours, Unread

DEFAULT_BASE_URL = "https://slack.com/api/"
# Slack states no bound on how soon a posted message shows in conversations.history: the
# adapter declares one (docs/providers/slack.md, "How consistent the history is").
SEARCH_LAG = timedelta(minutes=1)
# Free workspaces hide messages older than 90 days from the API; paid ones keep what their
# retention setting keeps. A tool may declare no further horizon than this.
HORIZON = timedelta(days=90)
# Slack stamps a message with its own clock: the window is widened by this much each side.
CLOCK_ALLOWANCE = timedelta(seconds=60)
_CHANNEL = re.compile(r"[CGD][A-Z0-9]{8,20}")
_KEYS = {"channel", "base_url", "token_env", "timeout"}


@dataclass
class Slack(AdapterBase):
    name: ClassVar[str] = "slack"
    callbacks: ClassVar[SlackEvents] = SlackEvents()

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        """No keys; a lookup that lists the channel's history over a window, complete once
        every page is read, eventually consistent by Slack's silence; signed Events API
        callbacks."""
        return Backing(
            honours_key=False,
            lookup=True,
            lookup_consistency="eventual",
            search_lag=SEARCH_LAG,
            proves_absence=True,
            lookup_horizon=HORIZON,
            lists_windows=True,
            callbacks=SlackEvents.name,
        )

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        unknown = sorted(set(config) - _KEYS)
        problems = [f"{key} is not a setting of the slack adapter" for key in unknown]
        channel = config.get("channel")
        if not isinstance(channel, str) or not _CHANNEL.fullmatch(channel):
            problems.append("channel must be a Slack channel ID (C…, G… or D…), not a name")
        base_url = config.get("base_url", DEFAULT_BASE_URL)
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            problems.append("base_url must be the Web API's http(s) address")
        if not secret_variable(config, "token", mode):
            problems.append(
                f"token_env must name the environment variable holding the bot token "
                f"(a name, or a table with a {mode!r} entry)"
            )
        return problems

    def _client(self) -> Any:
        base_url = self.config.get("base_url") or DEFAULT_BASE_URL
        return history.client(str(base_url), self.secret("token"), self.timeout)

    def _read(self, start: datetime, end: datetime) -> list[dict] | Lookup:
        channel = self.config.get("channel")
        if not isinstance(channel, str) or not channel:
            return inconclusive("no channel configured for the slack adapter")
        if not self.secret("token"):
            return inconclusive("the bot token's environment variable is not set")
        try:
            return history.read_window(self._client(), channel, _ts(start), _ts(end))
        except Unread as unread:
            return inconclusive(unread.detail, retry_after=unread.retry_after)

    def lookup(self, effect: Effect) -> Lookup:
        now = datetime.now(UTC)
        read = self._read(effect.created_at - CLOCK_ALLOWANCE, now + CLOCK_ALLOWANCE)
        if isinstance(read, Lookup):
            return read
        try:
            marked = [mine for message in read if (mine := history.ours(message))]
        except ValueError as exc:
            return inconclusive(f"a message may be ours and cannot be read: {exc}")
        matching = [mine for mine in marked if mine.key == effect.idempotency_key]
        if not matching:
            return not_found("no message in the channel's history carries our key", listed=True)
        if len(matching) > 1:
            refs = [history.ref(mine.ts) for mine in reversed(matching)]  # oldest first
            return duplicate(refs, f"{len(matching)} messages in the channel carry one key")
        return _judge(effect, matching[0])

    def list_window(self, start: datetime, end: datetime) -> Listing:
        """Every message with our metadata posted in [start, end): its key as the reference
        (none when the metadata cannot be read: no effect explains such a message)."""
        read = self._read(start, end)
        if isinstance(read, Lookup):
            return Listing(False, detail=read.detail)
        records = []
        for message in reversed(read):  # oldest first
            try:
                mine = history.ours(message)
                reference = mine.key if mine else None
            except ValueError:
                reference = ""
            stamp = history.timestamp(message["ts"])
            if reference is None or stamp >= _ts(end):
                continue
            records.append(_record(str(message["ts"]), reference, stamp))
        return Listing(True, tuple(records))


def _judge(effect: Effect, mine: Ours) -> Lookup:
    """Found; a message whose effect id is another's differs from our request."""
    mismatches = [] if mine.effect == str(effect.id) else ["ledger_effect"]
    ref = history.ref(mine.ts)
    return replace(found(ref, "confirmed", mismatches, answer=mine.message), listed=True)


def _record(ts: str, reference: str, stamp: Decimal) -> Record:
    return Record(
        provider_ref=history.ref(ts),
        reference=reference,
        type="message",
        status="succeeded",
        amount_minor=0,
        currency="",
        occurred_at=datetime.fromtimestamp(float(stamp), UTC),
    )


def _ts(moment: datetime) -> Decimal:
    """A moment as Slack's ts (seconds, six decimals)."""
    return Decimal(f"{moment.timestamp():.6f}")
