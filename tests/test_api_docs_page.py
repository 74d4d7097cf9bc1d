"""The agent API's docs page: Swagger UI from the site's pinned copy, under the site's policy
(the browser test in tests/browser/test_api_docs.py shows it working in Chromium)."""

from __future__ import annotations

import re

from django.test import Client

from tests.helpers import ROOT

VENDORED = "vendor/swagger-ui-dist-5.35.0"


def test_the_docs_page_loads_swagger_ui_from_the_sites_pinned_copy(db):
    page = Client().get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    sources = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert f"/static/{VENDORED}/swagger-ui-bundle.js" in sources
    assert f"/static/{VENDORED}/swagger-ui.css" in sources
    assert [s for s in sources if "//" in s] == []  # nothing from another site
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "LICENSE", "NOTICE"):
        assert (ROOT / "static" / VENDORED / name).is_file()


def test_the_docs_page_runs_under_the_sites_own_policy(db):
    docs = Client().get("/api/v1/docs")
    assert docs["Content-Security-Policy"] == Client().get("/login/")["Content-Security-Policy"]
    # The only inline <script> holds data (the settings), which the policy does not execute.
    inline = re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", docs.content.decode())
    assert inline == [' type="application/json" id="swagger-settings"']
