"""The documentation site: Sphinx with MyST Markdown and the Furo theme (docs/adr/0001).

`make docs` builds it with warnings as errors (a broken link, a missing page or anchor, a page
outside the table of contents fails the build); `make docs-serve` rebuilds on every save.
"""

from __future__ import annotations

project = "Effect Ledger"
author = "the Effect Ledger developers"
copyright = "2026, the Effect Ledger developers"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
# Every heading up to level 3 gets an anchor, so `page.md#a-heading` links are checked too.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]
# A Markdown link to a file that is not a page (a test module, a source file) is checked
# against the repository by tests/test_docs.py, not by Sphinx.
myst_all_links_external = False
nitpicky = True

html_theme = "furo"
html_title = "Effect Ledger"
html_static_path: list[str] = []
html_show_sourcelink = False
