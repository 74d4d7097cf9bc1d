"""The adapter of GitHub issues: was this effect's issue opened?

GitHub keeps no idempotency key for issue creation, so the effect's identity travels as a
marker in the issue's body (`marker`), and the lookup reads the repository's issues list from
a little before the effect was recorded, every page (`issues`): the listing is the
repository's own, not the eventually consistent search index, so a complete one proves that
no issue carrying the marker was opened in the window. One issue carrying it: found
(confirmed; the provider reference is the issue's `node_id`, which survives a transfer and is
the same in the list, the webhook and GraphQL). Two or more: duplicate. Pull requests are in
the same list and are never taken for the effect's issue.

Configured per tool, e.g. in tools.toml:

    reconciler = "github"
    reconciler_config = { owner = "acme", repo = "support", token_env = "GITHUB_TOKEN" }

`base_url` defaults to https://api.github.com (GitHub Enterprise Server: https://HOST/api/v3),
`token_env` names the variable holding a token that can read the repository's issues (a table
by mode is allowed), `timeout` is seconds per request, `clock_skew` the seconds the window
reaches back before the effect was recorded (default 300, at most 3600), `window_max_pages`
the pages of 100 issues a window listing for restore mode may take (default 10,000).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from reconcilers.providers.base import AdapterBase, Backing, secret_variable
from reconcilers.providers.github import marker
from reconcilers.providers.github.callbacks import GitHubWebhooks
from reconcilers.providers.github.issues import AskLater, Issue, Repository
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

if TYPE_CHECKING:
    from ledger.models import Effect

DEFAULT_BASE_URL = "https://api.github.com"
DEFAULT_SKEW = 300
# Pages of issues one window listing may take (the configuration may set 1 to 100,000).
WINDOW_MAX_PAGES = 10_000
_OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
_REPO = re.compile(r"[A-Za-z0-9._-]{1,100}")


@dataclass
class GitHubIssues(AdapterBase):
    name: ClassVar[str] = "github"
    callbacks: ClassVar[GitHubWebhooks] = GitHubWebhooks()

    @classmethod
    def backing(cls, config: dict[str, Any]) -> Backing:
        """No key is kept by GitHub; the lookup is a complete listing of the repository's own
        issues (consistent, unlike search), which also lists windows for restore mode."""
        return Backing(
            honours_key=False,
            lookup=True,
            lookup_consistency="consistent",
            proves_absence=True,
            lists_windows=True,
            callbacks="github",
        )

    @classmethod
    def config_problems(cls, config: dict[str, Any], mode: str) -> list[str]:
        problems = []
        owner, repo = config.get("owner"), config.get("repo")
        if not isinstance(owner, str) or not _OWNER.fullmatch(owner):
            problems.append("owner must be the repository owner's GitHub login")
        if not isinstance(repo, str) or not _REPO.fullmatch(repo) or repo in (".", ".."):
            problems.append("repo must be the repository's name")
        base_url = config.get("base_url", DEFAULT_BASE_URL)
        if not isinstance(base_url, str) or not base_url.startswith(("https://", "http://")):
            problems.append("base_url must be GitHub's API address (https://…)")
        if not secret_variable(config, "token", mode):
            problems.append("token_env must name the variable that holds the GitHub token")
        skew = config.get("clock_skew", DEFAULT_SKEW)
        if isinstance(skew, bool) or not isinstance(skew, int) or not 0 <= skew <= 3600:
            problems.append("clock_skew must be a number of seconds from 0 to 3600")
        most = config.get("window_max_pages", WINDOW_MAX_PAGES)
        if isinstance(most, bool) or not isinstance(most, int) or not 1 <= most <= 100_000:
            problems.append("window_max_pages must be a whole number from 1 to 100000")
        return problems

    def _repository(self) -> Repository | str:
        """The configured repository, or why it cannot be asked."""
        problems = self.config_problems(self.config, self.mode)
        if problems:
            return "; ".join(problems)
        token = self.secret("token")
        if not token:
            return f"no GitHub token in ${secret_variable(self.config, 'token', self.mode)}"
        base = str(self.config.get("base_url") or DEFAULT_BASE_URL)
        return Repository(
            base, self.config["owner"], self.config["repo"], token, timeout=self.timeout
        )

    def window_start(self, effect: Effect) -> datetime:
        """Where the lookup's listing starts: when the effect was recorded, or when a copy of
        it on a branch a restore lost could have been sent, whichever is earlier, less the
        allowed skew between the ledger's clock and GitHub's."""
        born = effect.created_at
        lost = _lost_from(effect)
        if lost is not None and lost < born:
            born = lost
        return born - timedelta(seconds=int(self.config.get("clock_skew", DEFAULT_SKEW)))

    def lookup(self, effect: Effect) -> Lookup:
        repository = self._repository()
        if isinstance(repository, str):
            return inconclusive(repository)
        try:
            start = self.window_start(effect)
            listed = [i for i in repository.created_since(start) if not i.pull_request]
        except AskLater as later:
            return inconclusive(later.detail, retry_after=later.retry_after)
        except Exception as exc:
            # The ledger's own restore record could not be read: nothing is proven.
            return inconclusive(f"the lookup window could not be set: {type(exc).__name__}")
        ours = [
            (issue, tag)
            for issue in listed
            for tag in _distinct(marker.markers(issue.body))
            if tag.key == effect.idempotency_key
        ]
        if not ours:
            return not_found(
                f"none of {len(listed)} issues opened since {start.isoformat()} carries our key",
                listed=True,
            )
        if len(ours) > 1:
            refs = [issue.node_id for issue, _ in ours]
            return duplicate(refs, f"{len(ours)} issues carry our key")
        issue, tag = ours[0]
        answer = found(issue.node_id, "confirmed", _mismatches(effect, issue, tag), issue.summary())
        return replace(answer, listed=True)

    def list_window(self, start: datetime, end: datetime) -> Listing:
        """Every issue opened in [start, end), each with the key its marker carries ("" for an
        issue without one), for restore mode. Streamed: a page is fetched when the issues
        before it have been read, so a window of any size holds one page in memory; a page
        GitHub does not hand over (an error, a rate limit, an issue it cannot read), or more
        than `window_max_pages` of them (default 10,000), raises `ListingBroken`."""
        repository = self._repository()
        if isinstance(repository, str):
            return Listing(False, detail=repository)
        most = int(self.config.get("window_max_pages", WINDOW_MAX_PAGES))
        return Listing(True, _stream(repository.created_since(start, most), end))


def _stream(listed: Iterator[Issue], end: datetime) -> Iterator[Record]:
    """The issues opened before `end` as they come, pull requests left out; `ListingBroken`
    where a page could not be had."""
    while True:
        try:
            issue = next(listed, None)
        except AskLater as later:
            raise ListingBroken(later.detail) from None
        if issue is None:
            return
        if not issue.pull_request and issue.created_at < end:
            yield _record(issue)


def _distinct(tags: list[marker.Marker]) -> list[marker.Marker]:
    """One issue counts once for a key, however often a person pasted its marker."""
    return list(dict.fromkeys(tags))


def _mismatches(effect: Effect, issue: Issue, tag: marker.Marker) -> list[str]:
    """Where the issue found under our key differs from what the effect asked for."""
    differs = []
    if tag.effect != str(effect.id):
        differs.append(f"the marker names effect {tag.effect}, not {effect.id}")
    title = (effect.request or {}).get("title") if isinstance(effect.request, dict) else None
    if isinstance(title, str) and title != issue.title:
        differs.append("title differs from the request's")
    return differs


def _record(issue: Issue) -> Record:
    tags = marker.markers(issue.body)
    return Record(
        provider_ref=issue.node_id,
        reference=tags[-1].key if tags else "",
        # The statement's vocabulary has no ticket: an opened issue is a record that happened.
        type="charge",
        status="succeeded",
        amount_minor=0,
        currency="",
        occurred_at=issue.created_at,
    )


def _lost_from(effect: Effect) -> datetime | None:
    """When a copy of this effect on a lost branch could first have been sent, if a restore
    put it in doubt (`ledger.rules.reach`). Lookups run in a pool of threads: a connection
    opened for this in such a thread is closed again, not left to the thread."""
    from django.db import connection

    from ledger.rules.reach import lost_dispatch

    try:
        lost = lost_dispatch([effect.id]).get(effect.id)
    finally:
        if (
            threading.current_thread() is not threading.main_thread()
            and not connection.in_atomic_block
        ):
            connection.close()
    return lost[0] if lost else None
