"""The documentation site and what it, the READMEs and the code cite.

- The site (`docs/`, Sphinx with MyST Markdown) builds with warnings as errors; a copy with a
  link to a missing page, a missing heading and a missing file does not, and names each, so the
  strict build is known to catch every kind of broken link.
- Every repository file cited anywhere exists: Markdown links and file paths in the pages and
  READMEs, and file paths and Markdown file names in the comments and docstrings of the code.
  A citation of a Markdown file with an anchor also needs a heading with that anchor.
- `docs/index.md` reaches every page through its table of contents.
"""

from __future__ import annotations

import ast
import io
import os
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Where citations are looked for.
MARKDOWN_FILES = ("README.md", "bench/README.md", "client/README.md")
CODE_DIRS = ("ledger", "reconcilers", "reviews", "config", "devstack", "client", "bench", "tests")

# A repository path: segments joined by "/", ending in a file name with one of these extensions.
# Nothing word-like, no "/", "~" or ":" may stand right before it, so the path of a URL or of a
# web server is not taken for one; nor is a path whose first segment is a host name.
_EXTENSIONS = "py|md|sql|toml|html|css|js|json|jsonl|csv|txt|yml|yaml|cfg|ini|sh"
PATH = re.compile(
    r"(?<![\w./~<>:-])"
    rf"((?:\.\.?/)*(?:[\w.-]+/)+[\w.-]+\.(?:{_EXTENSIONS}))"
    r"(#[\w-]+)?"
    r"(?![\w/-])"
)
# A Markdown file named without a directory: README.md, security.md#keys.
BARE_MARKDOWN = re.compile(r"(?<![\w./~<>:-])([\w-]+\.md)(#[\w-]+)?(?![\w/-])")
# Markdown links and images: [text](target "title") and ![alt](target).
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# Files that exist only once something runs (var/: the stack's state, results, logs) or that
# the docs build writes; a citation of them names a place, not a file of the repository.
GENERATED = ("var/", "docs/_build/", ".venv/")
HOST = re.compile(r"^[\w-]+(\.[\w-]+)+/")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})")


@dataclass(frozen=True)
class Citation:
    source: Path  # the citing file
    line: int
    target: str  # as written, anchor included
    resolved: Path | None  # None: nowhere to be found
    anchor: str

    def __str__(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}: {self.target}"


# --- Reading Markdown --------------------------------------------------------------------------


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """Every line of a Markdown text, numbered from 1 (code blocks included: a path in a shell
    example is a citation too)."""
    yield from enumerate(text.splitlines(), start=1)


def heading_text(raw: str) -> str:
    """A heading as MyST renders it for its anchor: links as their text, no code or emphasis
    marks."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    return re.sub(r"[`*]", "", text)


def slugify(title: str) -> str:
    """MyST's GitHub-style heading anchor (`myst_parser.slugs.github_slugify`)."""
    return re.sub(r"[^\w\u4e00-\u9fff\- ]", "", title.lower().replace(" ", "-"))


def anchors(path: Path, *, deepest: int = 6) -> set[str]:
    """The anchors of a Markdown file's headings, up to `deepest` (docs/conf.py gives headings up
    to level 3 anchors), duplicates numbered as MyST numbers them."""
    found: set[str] = set()
    fence: str | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        mark = FENCE.match(line)
        if mark:
            if fence is None:
                fence = mark.group(1)[0]
            elif mark.group(1)[0] == fence:
                fence = None
            continue
        heading = HEADING.match(line)
        if fence is None and heading and len(heading.group(1)) <= deepest:
            slug = slugify(heading_text(heading.group(2)))
            unique, n = slug, 0
            while unique in found:
                n += 1
                unique = f"{slug}-{n}"
            found.add(unique)
    return found


# --- Finding citations -------------------------------------------------------------------------


def resolve(target: str, source: Path, *, from_file: bool) -> Path | None:
    """The repository file a citation names, or None. A Markdown link is relative to its page;
    a path in prose or code is relative to the repository (or, failing that, to the citing file,
    as in client/README.md); a template is named as Django finds it, under templates/; a bare
    Markdown name may stand beside the citing file, at the top or in docs/."""
    path = target.split("#", 1)[0]
    if not path:
        return source
    bases = [source.parent] if from_file or path.startswith(".") else [ROOT, source.parent]
    if "/" not in path:
        bases = [source.parent, ROOT, DOCS]
    elif path.endswith(".html"):
        bases.append(ROOT / "templates")  # a template by its name
    for base in bases:
        candidate = (base / path).resolve()
        if candidate.exists() and candidate.is_relative_to(ROOT):
            return candidate
    return None


def cite(source: Path, line: int, target: str, *, from_file: bool = False) -> Citation | None:
    path, _, anchor = target.partition("#")
    if path.startswith(GENERATED) or HOST.match(path):
        return None
    return Citation(source, line, target, resolve(target, source, from_file=from_file), anchor)


def citations_in_text(source: Path, numbered: Iterator[tuple[int, str]]) -> Iterator[Citation]:
    """File paths and bare Markdown names in prose, comments or docstrings."""
    for number, text in numbered:
        for match in PATH.finditer(text):
            found = cite(source, number, match.group(1) + (match.group(2) or ""))
            if found:
                yield found
        for match in BARE_MARKDOWN.finditer(text):
            found = cite(source, number, match.group(1) + (match.group(2) or ""))
            if found:
                yield found


def citations_in_markdown(source: Path) -> Iterator[Citation]:
    text = source.read_text(encoding="utf-8")
    for number, line in prose_lines(text):
        for match in LINK.finditer(line):
            target = match.group(1)
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
                continue  # a URL, or a path on a web server
            found = cite(source, number, target, from_file=True)
            if found:
                yield found
    # What links point at is checked above; in prose only what stands outside them.
    without_links = LINK.sub("]()", text)
    yield from citations_in_text(source, prose_lines(without_links))


def python_prose(source: Path) -> Iterator[tuple[int, str]]:
    """The comments and docstrings of a Python file, line by line."""
    text = source.read_text(encoding="utf-8")
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                first = body[0].lineno
                for offset, line in enumerate(body[0].value.value.splitlines()):
                    yield first + offset, line


def markdown_sources() -> list[Path]:
    pages = [p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts]
    return sorted(pages) + [ROOT / name for name in MARKDOWN_FILES if (ROOT / name).exists()]


def python_sources() -> list[Path]:
    files: list[Path] = []
    for name in CODE_DIRS:
        files += sorted(p for p in (ROOT / name).rglob("*.py") if "__pycache__" not in p.parts)
    return files


def all_citations() -> list[Citation]:
    found: list[Citation] = []
    for source in markdown_sources():
        found += citations_in_markdown(source)
    for source in python_sources():
        found += citations_in_text(source, python_prose(source))
    return found


def problem(citation: Citation) -> str:
    """What is wrong with a citation, or ""."""
    if citation.resolved is None:
        return "no such file in the repository"
    if citation.anchor and citation.resolved.suffix == ".md":
        deepest = 3 if citation.resolved.is_relative_to(DOCS) else 6
        if citation.anchor not in anchors(citation.resolved, deepest=deepest):
            return f"no heading with the anchor #{citation.anchor}"
    return ""


# --- The site ----------------------------------------------------------------------------------


def sphinx_build(source: Path, out: Path) -> subprocess.Popen[str]:
    """`make docs`'s build (warnings are errors), started; the caller waits for it."""
    return subprocess.Popen(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-q", "-b", "html",
         str(source), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=source.parent,
    )  # fmt: skip


def copy_of_the_repository(into: Path) -> Path:
    """The repository as the docs see it: docs/ copied (so a page can be changed), everything
    else linked, so that links from the pages to repository files still resolve."""
    into.mkdir()
    for entry in ROOT.iterdir():
        if entry.name != "docs":
            os.symlink(entry, into / entry.name)
    shutil.copytree(DOCS, into / "docs", ignore=shutil.ignore_patterns("_build"))
    return into / "docs"


# Each kind of broken link, as the copy's index gets it, and what its warning names.
BROKEN_LINKS = {
    "[a page that is not there](not-a-page.md)": "not-a-page.md",
    "[a heading that is not there](index.md#not-a-heading)": "not-a-heading",
    "[a repository file that is not there](../ledger/not-a-module.py)": "not-a-module.py",
}


def test_the_site_builds_strictly_and_a_broken_link_fails_the_build(tmp_path):
    site = sphinx_build(DOCS, tmp_path / "html")
    docs = copy_of_the_repository(tmp_path / "copy")
    index = docs / "index.md"
    index.write_text(
        index.read_text(encoding="utf-8") + "".join(f"\nSee {link}.\n" for link in BROKEN_LINKS),
        encoding="utf-8",
    )
    broken = sphinx_build(docs, tmp_path / "html-broken")
    # The timeouts only keep a hung build from hanging the suite: two builds at once on a busy
    # machine have taken over two minutes.
    code, output = site.wait(timeout=900), site.stdout.read()
    assert code == 0, f"sphinx-build -W failed:\n{output}"
    assert (tmp_path / "html" / "index.html").exists()
    code, output = broken.wait(timeout=900), broken.stdout.read()
    assert code != 0, "the build passed with broken links"
    warnings = [line for line in output.splitlines() if "WARNING" in line]
    for link, named in BROKEN_LINKS.items():
        # --keep-going reports every warning, and -W makes any one of them fail the build.
        assert any(named in line for line in warnings), f"no warning for {link}:\n{output}"


def test_every_cited_repository_file_exists():
    broken = [f"{c}  ({problem(c)})" for c in all_citations() if problem(c)]
    assert broken == [], "Citations of files or headings that do not exist:\n" + "\n".join(broken)


def test_the_citation_scan_finds_what_it_must(tmp_path, monkeypatch):
    """The scan itself: a missing file, a missing anchor and a bare Markdown name are found in
    pages, comments and docstrings; URLs, generated files and existing files are not flagged."""
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "real.sql").write_text("SELECT 1;\n")
    (repo / "docs" / "page.md").write_text(
        "# Page\n\n## Some `code` here\n\n"
        "[ok](../pkg/real.sql) [gone](../pkg/gone.sql) [here](page.md#some-code-here)\n"
        "[nowhere](page.md#nowhere) `pkg/real.sql` `pkg/other.sql` https://x.example/a/b.json\n"
        "`var/bench/x.json` /api/v1/openapi.json hooks.example.com/a/b.json GONE.md\n"
    )
    (repo / "pkg" / "mod.py").write_text(
        '"""Docstring citing pkg/real.sql and MISSING.md."""\n'
        "# a comment citing pkg/absent.toml\n"
        'X = "a string, not a docstring: pkg/ignored.toml"\n'
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", repo)
    monkeypatch.setattr(sys.modules[__name__], "DOCS", repo / "docs")
    page = list(citations_in_markdown(repo / "docs" / "page.md"))
    code = list(citations_in_text(repo / "pkg" / "mod.py", python_prose(repo / "pkg" / "mod.py")))
    flagged = sorted(c.target for c in page + code if problem(c))
    assert flagged == [
        "../pkg/gone.sql",
        "GONE.md",
        "MISSING.md",
        "page.md#nowhere",
        "pkg/absent.toml",
        "pkg/other.sql",
    ]
    assert {c.target for c in page + code} >= {"../pkg/real.sql", "pkg/real.sql"}


def toctree_entries(page: Path) -> list[Path]:
    """The pages a page's toctree directives list, as files."""
    entries: list[Path] = []
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if re.match(r"^(`{3,}|:{3,})\{toctree\}", stripped):
            inside = True
        elif inside and re.match(r"^(`{3,}|:{3,})$", stripped):
            inside = False
        elif inside and stripped and not stripped.startswith(":"):
            name = re.sub(r"^.*<(.+)>$", r"\1", stripped)
            entries.append((page.parent / name).with_suffix(".md"))
    return entries


def test_the_index_reaches_every_page():
    pages = {p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts}
    reached, todo = {DOCS / "index.md"}, [DOCS / "index.md"]
    while todo:
        for entry in toctree_entries(todo.pop()):
            assert entry in pages, f"a toctree lists {entry.relative_to(DOCS)}, which is missing"
            if entry not in reached:
                reached.add(entry)
                todo.append(entry)
    missing = sorted(str(p.relative_to(DOCS)) for p in pages - reached)
    assert missing == [], f"pages no table of contents reaches from docs/index.md: {missing}"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Keys and modes", "keys-and-modes"),
        ("`make drills`: the fault drills", "make-drills-the-fault-drills"),
        ("What may change within `/api/v1`", "what-may-change-within-apiv1"),
        ("0002: rules kept in PostgreSQL", "0002-rules-kept-in-postgresql"),
    ],
)
def test_anchors_are_made_as_myst_makes_them(heading, anchor):
    from myst_parser.slugs import github_slugify

    assert slugify(heading_text(heading)) == github_slugify(heading.replace("`", "")) == anchor
