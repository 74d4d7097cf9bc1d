"""The keyboard's shortcuts are said the same in four places: each decision kind's declaration
(its letter), the `?` help every page carries, the controls' `aria-keyshortcuts`, and the table
in docs/operators.md. A letter is one decision's only, and never one of the queue's own keys.
(tests/browser/test_keyboard_decisions.py presses them in Chromium.)"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from ledger.models import Reason
from ledger.rules.reviewqueue import open_review
from reviews.decisions.kinds import KINDS
from reviews.templatetags.shortcuts import HELP_SHORTCUT, PAGE_KEYS, SUBMIT
from tests.factories import signed_in
from tests.helpers import ROOT

OPERATORS = ROOT / "docs" / "operators.md"


def documented() -> dict[str, str]:
    """The keyboard table of docs/operators.md: each key, as written in its first column
    (`c`, `Ctrl`+`Enter`), and what it does on an effect page."""
    text = OPERATORS.read_text(encoding="utf-8")
    section = text.split("## Keyboard and small screens", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().split("|")[1:-1]]
        # A row of the keyboard table: | `c` | on the queue | on an effect page |
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0]] = cells[2]
    return rows


# How `aria-keyshortcuts` names the keys the guide writes: modifiers by their key names, and
# "?" with the Shift it is typed with.
_ARIA = {"Ctrl": "Control", "⌘": "Meta", "Esc": "Escape", "?": HELP_SHORTCUT}


def documented_tokens() -> set[str]:
    """Every shortcut the table documents, spelled as `aria-keyshortcuts` spells it: a cell's
    alternatives are parted by " / " or given in brackets, a chord's keys joined with "+"."""
    tokens = set()
    for cell in documented():
        for alternative in re.split(r" / | \(", cell):
            keys = re.findall(r"`([^`]+)`", alternative)
            if keys:
                tokens.add("+".join(_ARIA.get(key, key) for key in keys))
    return tokens


class _Attributes(HTMLParser):
    """Every element's attributes, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))


def elements(html: str) -> list[tuple[str, dict[str, str]]]:
    parser = _Attributes()
    parser.feed(html)
    return parser.elements


def test_each_decision_has_a_letter_of_its_own_that_no_page_key_takes():
    keys = [kind.key for kind in KINDS.values()]
    assert all(re.fullmatch(r"[a-z]", key) for key in keys), keys
    assert len(set(keys)) == len(keys)
    assert not set(keys) & PAGE_KEYS


def test_the_operators_guide_documents_every_decisions_letter_by_its_name():
    rows = documented()
    for kind in KINDS.values():
        assert rows.get(f"`{kind.key}`") == f"open *{kind.label}*", kind.action
    letters = {k.strip("`") for k in rows if re.fullmatch(r"`[a-z]`", k)}
    assert letters == {kind.key for kind in KINDS.values()} | {"o"}
    assert "`j` / `k`" in rows and "`?` / `Esc`" in rows
    assert "`Ctrl`+`Enter` (`⌘`+`Enter` on a Mac)" in rows and "`Enter`" in rows


def test_the_help_lists_each_decisions_letter_and_the_key_that_sends(olga):
    html = signed_in(olga).get("/queue/").content.decode()
    listed = {
        attrs["data-decide-key"]: attrs["data-action"]
        for tag, attrs in elements(html)
        if tag == "kbd" and "data-decide-key" in attrs
    }
    assert listed == {kind.key: str(action) for action, kind in KINDS.items()}
    help_ = html.split('<dialog id="shortcuts"', 1)[1].split("</dialog>", 1)[0]
    assert "<kbd>Ctrl</kbd>+<kbd>Enter</kbd>" in help_ and "<kbd>⌘</kbd>+<kbd>Enter</kbd>" in help_


def test_every_aria_keyshortcut_on_the_pages_is_documented(olga, make_effect):
    effect = make_effect("unknown", attempt=1, effect_key="keys-1:charge")
    open_review(effect.id, Reason.INCONCLUSIVE)
    client = signed_in(olga)
    declared = []
    for path in ("/queue/", f"/effects/{effect.id}/"):
        html = client.get(path).content.decode()
        declared += [(tag, attrs) for tag, attrs in elements(html) if "aria-keyshortcuts" in attrs]
    tokens = {t for _, attrs in declared for t in attrs["aria-keyshortcuts"].split()}
    assert tokens and tokens <= documented_tokens(), tokens - documented_tokens()
    assert set(SUBMIT.split()) | {HELP_SHORTCUT} <= documented_tokens()
    by_control = {(tag, attrs.get("data-decide", "")): attrs for tag, attrs in declared}
    for action in ("confirm", "fail"):  # what the page offers for an unknown effect
        assert by_control[("summary", action)]["aria-keyshortcuts"] == KINDS[action].key
    submits = [attrs for tag, attrs in declared if "data-decide-submit" in attrs]
    assert submits and all(a["aria-keyshortcuts"] == SUBMIT for a in submits)
    opens = [attrs for tag, attrs in declared if "data-open" in attrs]
    assert opens and all(a["aria-keyshortcuts"] == "o" for a in opens)
    helps = [attrs for tag, attrs in declared if "data-show-shortcuts" in attrs]
    # The header's help button, once on each page.
    assert len(helps) == 2 and all(a["aria-keyshortcuts"] == HELP_SHORTCUT for a in helps)
