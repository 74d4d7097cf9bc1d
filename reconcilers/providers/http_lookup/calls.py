"""How `http_lookup` speaks to a provider's API: its credentials, from the environment by name
(`auth`), its answers taken apart (`answer`: a 429 is "ask later", anything but a 200 with
JSON is inconclusive), and its pages followed (`pages`: a next link in the body, a cursor, or
the `Link` header).

Configuration (`reconciler_config`):

    auth = "bearer"   token_env = "TICKETS_TOKEN"                # Authorization: Bearer …
    auth = "basic"    username_env = "…"  password_env = "…"     # Authorization: Basic …
    auth = "header"   header = "X-Api-Key"  token_env = "…"      # the header holds the token
    paging = "next"   next = "links.next"       # the next page's URL at a path of the body
    paging = "cursor" cursor = "meta.next"  cursor_param = "cursor"   # a cursor passed back
    paging = "link"                             # RFC 8288 `Link: <…>; rel="next"`

Each `*_env` may be a table by the tool's mode (`{ test = "…", live = "…" }`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urljoin

import httpx

from reconcilers.providers.base import http_client, secret

AUTH = ("", "bearer", "basic", "header")
PAGING = ("", "next", "cursor", "link")
# Pages one search may follow before it gives up (and is asked again later); a window listing
# sets its own bound.
MAX_PAGES = 500
_HEADER_NAME = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def at(value: Any, path: str) -> Any:
    """The value at a dotted path of a JSON answer (list items by index), or None."""
    for part in [p for p in path.split(".") if p]:
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdecimal() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def config_problems(config: dict[str, Any]) -> list[str]:
    """What is wrong with the credentials and paging a configuration declares."""
    problems = []
    auth = config.get("auth", "")
    paging = config.get("paging") or ("next" if config.get("next") else "")
    if auth not in AUTH:
        problems.append(f"auth must be one of {list(AUTH[1:])}")
    needs = {"bearer": ["token"], "header": ["token"], "basic": ["username", "password"]}
    for key in needs.get(auth, []):
        if not config.get(f"{key}_env"):
            problems.append(f'auth = "{auth}" needs {key}_env, the variable that holds it')
    header = config.get("header", "")
    if auth == "header" and (
        not isinstance(header, str) or not header or set(header) - _HEADER_NAME
    ):
        problems.append('auth = "header" needs header, the name of the header')
    if paging not in PAGING:
        problems.append(f"paging must be one of {list(PAGING[1:])}")
    if paging == "next" and not isinstance(config.get("next"), str):
        problems.append('paging = "next" needs next, the path of the next page\'s URL')
    if paging == "cursor" and not isinstance(config.get("cursor"), str):
        problems.append('paging = "cursor" needs cursor, the path of the next cursor')
    return problems


def credentials(config: dict[str, Any], mode: str) -> tuple[dict[str, str], Any]:
    """The headers and the httpx auth that the configured scheme asks for."""
    auth = config.get("auth", "")
    if auth == "bearer":
        return {"Authorization": f"Bearer {secret(config, 'token', mode)}"}, None
    if auth == "header":
        return {str(config["header"]): secret(config, "token", mode)}, None
    if auth == "basic":
        return {}, httpx.BasicAuth(
            secret(config, "username", mode), secret(config, "password", mode)
        )
    return {}, None


class AskLater(Exception):
    """The provider gave no usable answer: `detail` says why, `retry_after` when it asked to
    be asked again (seconds, a 429's Retry-After)."""

    def __init__(self, detail: str, retry_after: float | None = None, status: int = 0) -> None:
        super().__init__(detail)
        self.detail, self.retry_after, self.status = detail, retry_after, status


def retry_after(response: httpx.Response) -> float | None:
    """A Retry-After header in seconds (delta-seconds or an HTTP date), or None."""
    raw = response.headers.get("retry-after", "").strip()
    if raw.isdecimal() and len(raw) <= 9:
        return float(raw)
    try:
        moment = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())


@dataclass
class Page:
    body: Any
    response: httpx.Response


def answer(url: str, config: dict[str, Any], mode: str) -> Page:
    """One GET, as a 200 with a JSON body, or `AskLater` saying why not."""
    headers, auth = credentials(config, mode)
    timeout = config.get("timeout", 5)
    try:
        response = http_client().get(
            url,
            headers=headers,
            auth=auth,
            timeout=float(timeout) if isinstance(timeout, int | float) and 0 < timeout <= 60 else 5,
        )
    except httpx.HTTPError as exc:
        raise AskLater(f"provider unreachable: {type(exc).__name__}") from None
    if response.status_code == 429:
        raise AskLater("provider answered 429 (too many requests)", retry_after(response))
    if response.status_code != 200:
        raise AskLater(
            f"provider answered {response.status_code}",
            retry_after(response),
            status=response.status_code,
        )
    try:
        return Page(response.json(), response)
    except ValueError:
        raise AskLater("provider answered something that is not JSON") from None


def pages(url: str, config: dict[str, Any], mode: str, most: int = MAX_PAGES) -> Iterator[Page]:
    """Every page of an answer, as the configured paging follows them, each fetched when the
    one before it has been taken; `AskLater` when a page is missing or there are more than
    `most` (anything short of every page proves nothing)."""
    # A `next` path alone (as configured before `paging` existed) means paging by next links.
    paging = config.get("paging") or ("next" if config.get("next") else "")
    for _ in range(most):
        page = answer(url, config, mode)
        yield page
        if paging == "next":
            following = at(page.body, config["next"])
        elif paging == "link":
            following = page.response.links.get("next", {}).get("url")
        elif paging == "cursor":
            cursor = at(page.body, config["cursor"])
            if cursor in (None, ""):
                return
            if not isinstance(cursor, str | int):
                raise AskLater("the provider's next cursor is not a string")
            # The search's own query stays; only the cursor changes from page to page.
            name = str(config.get("cursor_param") or "cursor")
            url = str(httpx.URL(url).copy_merge_params({name: cursor}))
            continue
        else:
            return
        if following in (None, ""):
            return
        if not isinstance(following, str):
            raise AskLater("the provider's next page is not a URL")
        url = urljoin(url, following)
    raise AskLater(f"more than {most} pages")
