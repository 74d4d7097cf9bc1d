"""How the adapter reads a repository's issues: GitHub's issues list, every page of it, through
PyGithub's requester (its authentication, base URL and error classes; PyGithub itself is
imported only here, and only when a call is made: loading it takes about half a second).

`GET /repos/{owner}/{repo}/issues?state=all&sort=created&direction=desc&since=…` lists the
repository's own issues, not a search index. `since` filters by *updated* time, so an issue
created at or after it is always listed (its update time is never before its creation); older
issues updated since are listed too, and the walk stops at the first one created before the
window, the order being newest first. Pull requests are in the same list (they carry a
`pull_request` field): they are read and counted, never taken for issues.

Anything short of every page of well-formed issues is `AskLater`: a 403 or 429 from a
(secondary) rate limit with the wait it asks for (`Retry-After`, or `x-ratelimit-reset` when
`x-ratelimit-remaining` is 0), any other status, an answer that is not a JSON list of issues,
a broken connection, a `Link` to another host, more pages than the caller allows (a lookup:
MAX_PAGES). The pages are fetched one at a time as the issues are taken, so a walk holds one
page in memory, whatever its length.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Pages of 100 one lookup's listing may follow before it gives up (and is asked again later).
MAX_PAGES = 100
PER_PAGE = 100
_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="?([a-z]+)"?')


class AskLater(Exception):
    """GitHub gave no usable answer: `detail` says why, `retry_after` (seconds) when it said
    how long to wait."""

    def __init__(self, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail, self.retry_after = detail, retry_after


@dataclass(frozen=True)
class Issue:
    """One listed issue (or pull request), checked for the fields the ledger reads."""

    number: int
    node_id: str
    title: str
    body: str | None
    state: str
    created_at: datetime
    html_url: str
    pull_request: bool

    def summary(self) -> dict[str, Any]:
        """What the ledger keeps of it as the provider's answer."""
        return {
            "number": self.number,
            "node_id": self.node_id,
            "title": self.title,
            "state": self.state,
            "html_url": self.html_url,
            "created_at": self.created_at.isoformat(),
        }


def timestamp(value: datetime) -> str:
    """GitHub's ISO 8601 form, in UTC to the second: YYYY-MM-DDTHH:MM:SSZ."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError("created_at is not a string")
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("created_at has no time zone")
    return moment


def issue(item: Any) -> Issue:
    """An issue object of the list, or ValueError when it lacks what GitHub always sends."""
    if not isinstance(item, dict):
        raise ValueError("an item is not an object")
    number, node_id, title = item.get("number"), item.get("node_id"), item.get("title")
    body, state, url = item.get("body"), item.get("state"), item.get("html_url")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ValueError("an issue has no number")
    if not isinstance(node_id, str) or not node_id or not isinstance(title, str):
        raise ValueError(f"issue {number} has no node_id or title")
    if body is not None and not isinstance(body, str):
        raise ValueError(f"issue {number} has a body that is not text")
    if state not in ("open", "closed") or not isinstance(url, str):
        raise ValueError(f"issue {number} has no known state or html_url")
    pull = item.get("pull_request")
    if pull is not None and not isinstance(pull, dict):
        raise ValueError(f"issue {number} has a pull_request that is not an object")
    return Issue(
        number, node_id, title, body, state, parse_time(item.get("created_at")), url, bool(pull)
    )


def _wait(status: int, headers: dict[str, Any]) -> float | None:
    """The wait a rate-limited answer asks for, in seconds (GitHub: `retry-after`, else the
    primary limit's reset when nothing remains of it)."""
    raw = str(headers.get("retry-after") or "").strip()
    if raw.isdecimal() and len(raw) <= 9:
        return float(raw)
    remaining = str(headers.get("x-ratelimit-remaining") or "").strip()
    reset = str(headers.get("x-ratelimit-reset") or "").strip()
    if remaining == "0" and reset.isdecimal() and len(reset) <= 12:
        return max(0.0, int(reset) - time.time())
    return None


def _next(headers: dict[str, Any]) -> str | None:
    for url, rel in _LINK.findall(str(headers.get("link") or "")):
        if rel == "next":
            return url
    return None


class Repository:
    """One repository's issues list, as a token sees it."""

    def __init__(self, base_url: str, owner: str, repo: str, token: str, timeout: float) -> None:
        from github import Auth, Github

        self.path = f"/repos/{owner}/{repo}/issues"
        self.github = Github(
            base_url=base_url.rstrip("/"),
            auth=Auth.Token(token) if token else None,
            timeout=max(1, round(timeout)),
            # No retries and no pacing here: a rate limit is an answer ("ask later"), and the
            # reconciler, not a sleep in this thread, decides when to ask again.
            retry=None,
            seconds_between_requests=None,
            seconds_between_writes=None,
            per_page=PER_PAGE,
        )

    def created_since(self, start: datetime, most: int = MAX_PAGES) -> Iterator[Issue]:
        """Every issue and pull request created at or after `start`, newest first, over all
        pages (at most `most`), a page fetched when the issues before it have been taken;
        `AskLater` as soon as a page is missing or unreadable."""
        # GitHub's times are whole seconds: an issue of second `start` is in the window.
        start = start.replace(microsecond=0)
        url: str | None = self.path
        params: dict[str, Any] | None = {
            "state": "all",
            "sort": "created",
            "direction": "desc",
            "since": timestamp(start),
            "per_page": PER_PAGE,
        }
        # The creation time of the last issue taken, and the issues taken that share it.
        oldest: datetime | None = None
        alike: set[str] = set()
        for _ in range(most):
            headers, page = self._get(url or "", params)
            if not isinstance(page, list):
                raise AskLater("GitHub's answer is not a list of issues")
            try:
                issues = [issue(item) for item in page]
            except ValueError as exc:
                raise AskLater(
                    f"GitHub's answer holds an issue the ledger cannot read ({exc})"
                ) from None
            for found in issues:
                if found.created_at < start:
                    return
                # Offset pages shift when an issue is opened meanwhile: one may come twice.
                # The list is newest first, so an issue taken before is no older than the
                # last one taken: only those of its second need remembering.
                if oldest is None or found.created_at < oldest:
                    oldest, alike = found.created_at, set()
                elif found.created_at > oldest or found.node_id in alike:
                    continue
                alike.add(found.node_id)
                yield found
            url, params = _next(headers), None
            if url is None:
                return
        raise AskLater(f"more than {most} pages of issues")

    def _get(self, url: str, params: dict[str, Any] | None) -> tuple[dict[str, Any], Any]:
        from github import GithubException

        try:
            return self.github.requester.requestJsonAndCheck("GET", url, parameters=params)
        except GithubException as exc:
            headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
            wait = _wait(exc.status, headers) if exc.status in (403, 429) else None
            said = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else "")
            raise AskLater(f"GitHub answered {exc.status}: {str(said)[:200]}", wait) from None
        except AssertionError:
            # PyGithub refuses to follow a URL to another host than the configured one.
            raise AskLater("GitHub's next page is on another host") from None
        except Exception as exc:
            # A refused or broken connection, a timeout, a body cut short (requests' and
            # json's own errors): no answer.
            raise AskLater(f"no answer from GitHub: {type(exc).__name__}") from None
