"""The Slack adapter: did the message of this effect land in the channel?

Configured per tool, e.g. in tools.toml:

    reconciler = "slack"
    reconciler_config = { channel = "C0123456789",
                          token_env = { test = "SLACK_TEST_BOT_TOKEN", live = "SLACK_BOT_TOKEN" } }

`channel` is the channel's ID (history is read by ID, not by name), `token_env` names the
variable holding the bot token (scopes `chat:write` and the channel's `*:history`),
`base_url` defaults to Slack's Web API, `timeout` to 5 seconds and `window_max_pages` (the pages
of history a window listing for restore mode may take) to 10,000.

The lookup reads the channel's history from the effect's creation (less `CLOCK_ALLOWANCE`)
to now (plus it), every page, and looks for messages carrying the effect's key in their
metadata: one is found (its `ts`, in Slack's permalink form, is the provider's reference),
two or more are a duplicate, none in a complete reading is a listed not-found. What such a
not-found cannot see (a deleted message, a thread reply, history beyond the workspace's
retention) and why the adapter declares a search lag: docs/providers/slack.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from ledger.models import Effect
from reconcilers.providers.base import AdapterBase, Backing, secret_variable
from reconcilers.providers.outcomes import (
    Listing,
    ListingBroken,
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
_KEYS = {"channel", "base_url", "token_env", "timeout", "window_max_pages"}
# Pages of history one window listing may take (the configuration may set 1 to 100,000).
WINDOW_MAX_PAGES = 10_000


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
        if problem := _window_problem(config):
            problems.append(problem)
        return problems

    def _client(self) -> Any:
        base_url = self.config.get("base_url") or DEFAULT_BASE_URL
        return history.client(str(base_url), self.secret("token"), self.timeout)

    def _unready(self) -> str:
        """Why the channel's history cannot be asked for ("" when it can)."""
        channel = self.config.get("channel")
        if not isinstance(channel, str) or not channel:
            return "no channel configured for the slack adapter"
        if not self.secret("token"):
            return "the bot token's environment variable is not set"
        return ""

    def _read(self, start: datetime, end: datetime) -> list[dict] | Lookup:
        if problem := self._unready():
            return inconclusive(problem)
        channel = str(self.config["channel"])
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
        (none when the metadata cannot be read: no effect explains such a message). Streamed:
        a page of history is fetched when the records before it have been read, so a window
        of any size holds one page in memory; a page Slack does not hand over (an error, a
        rate limit, a page not of Slack's shape), or more than `window_max_pages` of them
        (default 10,000), raises `ListingBroken`. Slack lists newest first: each page's
        records come oldest first, the pages from the newest to the oldest."""
        if problem := self._unready() or _window_problem(self.config):
            return Listing(False, detail=problem)
        most = int(self.config.get("window_max_pages", WINDOW_MAX_PAGES))
        channel, oldest, latest = str(self.config["channel"]), _ts(start), _ts(end)
        pages = history.pages(self._client(), channel, oldest, latest, most)
        return Listing(True, _stream(pages, latest))


def _window_problem(config: dict[str, Any]) -> str:
    most = config.get("window_max_pages", WINDOW_MAX_PAGES)
    if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 100_000:
        return "window_max_pages must be a whole number from 1 to 100000"
    return ""


def _stream(pages: Iterator[list[dict]], latest: Decimal) -> Iterator[Record]:
    """The records of each page as it comes; `ListingBroken` where a page could not be had."""
    while True:
        try:
            page = next(pages, None)
        except Unread as unread:
            raise ListingBroken(unread.detail) from None
        if page is None:
            return
        yield from _records(page, latest)


def _records(page: list[dict], latest: Decimal) -> list[Record]:
    """A page's messages with our metadata from before `latest`, oldest first."""
    records = []
    for message in reversed(page):
        try:
            mine = history.ours(message)
            reference = mine.key if mine else None
        except ValueError:
            reference = ""
        stamp = history.timestamp(message["ts"])
        if reference is None or stamp >= latest:
            continue
        records.append(_record(str(message["ts"]), reference, stamp))
    return records


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
