"""Browser tests: Debian's Chromium, driven by pytest-playwright, against `live_server`.

Playwright's sync API keeps an asyncio loop running in the test thread from the moment it
starts, and Django refuses ORM calls from a thread with a running loop. So the Playwright
fixtures are overridden here with *package* scope, and Django's check is relaxed for exactly
as long as Playwright runs: when these tests are done, Playwright stops, the variable goes, and
the rest of the suite runs under the normal check.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import (
    Browser,
    BrowserType,
    ConsoleMessage,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from tests.helpers import PASSWORD, ROOT

CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking switches, Chromium's own connections crowd out the test's
# on some machines and page loads are refused.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "var" / "artifacts" / "screenshots"
# How long an expectation waits by default; the overview's refresh waits longer on its own.
TIMEOUT_MS = 10_000


@pytest.fixture(scope="package")
def playwright() -> Iterator[Playwright]:
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    pw = sync_playwright().start()
    try:
        yield pw
    finally:
        pw.stop()
        if previous is None:
            del os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"]
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture(scope="package")
def browser_type_launch_args() -> dict[str, Any]:
    if not CHROMIUM.exists():
        # A failure, not a skip: a run without the browser tests must not look green.
        pytest.fail(
            f"Chromium is missing at {CHROMIUM}: the browser tests need Debian's chromium "
            "package (`apt-get install chromium`, which `make test` runs when it is missing).",
            pytrace=False,
        )
    return {"executable_path": str(CHROMIUM), "args": CHROMIUM_ARGS, "headless": True}


@pytest.fixture(scope="package")
def browser_type(playwright: Playwright, browser_name: str) -> BrowserType:
    return getattr(playwright, browser_name)


@pytest.fixture(scope="package")
def launch_browser(
    browser_type_launch_args: dict[str, Any], browser_type: BrowserType
) -> Callable[..., Browser]:
    def launch(**kwargs: Any) -> Browser:
        return browser_type.launch(**{**browser_type_launch_args, **kwargs})

    return launch


@pytest.fixture(scope="package")
def browser(launch_browser: Callable[..., Browser]) -> Iterator[Browser]:
    browser = launch_browser()
    yield browser
    browser.close()


@pytest.fixture(scope="package")
def browser_context_args(live_server) -> dict[str, Any]:
    return {"base_url": live_server.url, "viewport": {"width": 1280, "height": 900}}


@pytest.fixture(autouse=True)
def _expectations_wait_long_enough() -> None:
    # A live server under a full test run answers its first requests slowly.
    expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture(autouse=True)
def _quick_password_hashes(settings) -> None:
    # Every test signs in by typing a password; the production hasher's million PBKDF2 rounds
    # would cost about a second per persona and per sign-in. The check itself stays real.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


class Watched:
    """A page's console: CSP violations and uncaught script errors fail the test at the end."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[ConsoleMessage] = []
        self.script_errors: list[str] = []
        page.on("console", lambda message: self.console.append(message))
        page.on("pageerror", lambda error: self.script_errors.append(str(error)))

    @property
    def csp_violations(self) -> list[str]:
        return [m.text for m in self.console if "Content Security Policy" in m.text]


@pytest.fixture
def watch() -> Iterator[Callable[[Page], Watched]]:
    watched: list[Watched] = []

    def start(page: Page) -> Watched:
        watched.append(Watched(page))
        return watched[-1]

    yield start
    for w in watched:
        assert w.csp_violations == [], f"CSP violations on {w.page.url}"
        assert w.script_errors == [], f"script errors on {w.page.url}"


def log_in(page: Page, user: User) -> None:
    """Sign in through the login form, typing as a person would."""
    page.goto("/login/")
    page.get_by_label("Username").fill(user.username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Overview", level=1)).to_be_visible()
    expect(page.locator("header .who")).to_contain_text(user.username)


@pytest.fixture
def open_page(new_context, watch) -> Callable[..., Page]:
    """A page in a fresh browser context (its own cookies), its console watched."""

    def open_(**context_args: Any) -> Page:
        page = new_context(**context_args).new_page()
        page.set_default_timeout(TIMEOUT_MS)
        watch(page)
        return page

    return open_


@pytest.fixture
def signed_in(open_page) -> Callable[..., Page]:
    """A page in a fresh browser context, signed in as `user`."""

    def sign_in(user: User, **context_args: Any) -> Page:
        page = open_page(**context_args)
        log_in(page, user)
        return page

    return sign_in


def nav(page: Page, name: str) -> None:
    """Follow a link of the main navigation, and wait until the new page's deferred scripts have
    run (htmx binds its triggers on DOMContentLoaded; a change made before then is not sent)."""
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name).click()
    page.wait_for_load_state("load")


def path_of(page: Page) -> str:
    return re.sub(r"^https?://[^/]+", "", page.url)


def fill_decision(
    page: Page, action: str, *, reason: str, ref: str = "", evidence: str = ""
) -> None:
    """Open the decision's disclosure (unless it is already open) and fill its form."""
    decision = page.locator(f"#decide-{action}")
    if decision.get_attribute("open") is None:
        decision.locator("summary").click()
    if ref:
        decision.get_by_role("textbox", name="Provider reference").fill(ref)
    if evidence:
        decision.get_by_role("textbox", name="Evidence").fill(evidence)
    decision.get_by_role("textbox", name="Reason").fill(reason)


def confirm_decision(page: Page, action: str) -> None:
    """Submit the decision's form, then confirm it in the dialog that names it."""
    decision = page.locator(f"#decide-{action}")
    decision.locator("button[data-decide-submit]").click()
    decision.locator("dialog [data-dialog-confirm]").click()
