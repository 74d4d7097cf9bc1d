"""Every page clean, in Chromium: an operator and an auditor visit every page of a ledger with
something in each status, kind and reason. No request any page makes (its htmx partials, its
scripts and styles, the favicon) is answered 4xx or 5xx, none fails, and the console shows no
error, CSP violation or uncaught script error (`watch`)."""

from __future__ import annotations

import pytest

from tests.browser.pages import Visits, ledger_with_everything

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("persona", ["olga", "audrey"])
def test_every_page_loads_without_an_error(request, signed_in, make_effect, alice, persona):
    paths = ledger_with_everything(make_effect, alice)
    page = signed_in(request.getfixturevalue(persona))
    visits = Visits(page)

    for path in paths:
        visits.visit(path)

    assert visits.problems == []
    assert len(paths) > 30


def test_the_favicon_and_the_api_docs_load(signed_in, olga):
    page = signed_in(olga)
    visits = Visits(page)
    favicon = page.request.get("/favicon.ico")
    assert favicon.ok and favicon.headers["content-type"].startswith("image/svg")

    visits.visit("/api/v1/docs")

    assert visits.problems == []
