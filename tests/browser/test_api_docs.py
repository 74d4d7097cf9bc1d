"""The agent API's docs page in Chromium: Swagger UI from the site's own pinned copy, under the
site's Content-Security-Policy, listing every operation of the schema."""

from __future__ import annotations

import pytest
from playwright.sync_api import ConsoleMessage, Request, expect

from ledger.api.app import api

pytestmark = pytest.mark.browser


def test_the_api_docs_page_lists_every_operation_without_errors(open_page, live_server):
    page = open_page()
    errors: list[str] = []
    requested: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            errors.append(message.text)

    def on_request(request: Request) -> None:
        requested.append(request.url)

    page.on("console", on_console)
    page.on("request", on_request)
    response = page.goto("/api/v1/docs")
    assert response is not None and response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]

    schema = api.get_openapi_schema()
    operations = sum(len(methods) for methods in schema["paths"].values())
    expect(page.locator(".opblock")).to_have_count(operations)
    expect(page.locator(".opblock-summary-path", has_text="/api/v1/effects/{effect_id}/claim"))
    expect(page.get_by_role("heading", name="Effect Ledger agent API")).to_be_visible()

    # An operation opens to show its parameters: the UI works, not only its first paint.
    page.locator(".opblock-post .opblock-summary-path", has_text="/api/v1/recovery").click()
    expect(page.locator(".opblock-post.is-open .opblock-body")).to_be_visible()

    assert errors == []
    # Nothing from another site: no CDN, no validator badge.
    assert [url for url in requested if not url.startswith(live_server.url)] == []
