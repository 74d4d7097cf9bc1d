"""The SLO pack under deploy/: the alert rules and their promtool unit tests, the Grafana
dashboard, and the runbooks the alerts link to.

- promtool (taken into the venv by `make install-test`) checks the rules and runs their unit
  tests; the test fails, never skips, without it. A rule changed under its tests fails them.
- Every alert is unit-tested firing and not firing, has a severity, a summary, a description and
  a runbook_url naming a page of docs/operations/runbooks/ that says what the alert means, how
  to check, what to do and when to escalate.
- Every metric the rules and the dashboard name is one that /metrics exports (read from a real
  scrape), and every metric /metrics exports is in docs/operations/metrics.md.
- The dashboard is Grafana dashboard JSON whose queries promtool parses as PromQL.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML comes with the test tools (myst-parser, schemathesis)
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from ledger.overview.summary import summary
from tests.helpers import ROOT

RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "effect-ledger.json"
DOCS = ROOT / "docs"
RUNBOOKS = DOCS / "operations" / "runbooks"
METRICS_PAGE = DOCS / "operations" / "metrics.md"
# Where the rules expect the documentation site; docs/operations/runbooks/index.md says so.
DOCS_SITE = "https://ledger-docs.invalid/"
# Series Prometheus writes itself for every scrape, not the ledger.
PROMETHEUS_OWN = frozenset({"up"})
SEVERITIES = frozenset({"warning", "critical"})
RUNBOOK_SECTIONS = ("What it means", "How to check", "What to do", "When to escalate")
TOKEN = "metrics-token-for-the-slo-pack"


def promtool() -> str:
    beside = Path(sys.executable).parent / "promtool"
    found = str(beside) if beside.exists() else shutil.which("promtool")
    assert found, "promtool is missing: `make install-test` takes it from Debian's prometheus"
    return found


def run_promtool(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd
    )


def alerting_rules(path: Path = RULES) -> list[dict[str, Any]]:
    groups = yaml.safe_load(path.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


# --- Metric names in PromQL ------------------------------------------------------------------

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_OFFSET = re.compile(r"\boffset\s+-?[\w$]+")
# A name: not part of a number, a variable ($job) or a longer name; not a function call.
_NAME = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
    | {"by", "without", "on", "ignoring", "group_left", "group_right"}
)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what is left once strings, label
    matchers, ranges, grouping clauses, offsets, numbers and function names are taken out."""
    text = _STRINGS.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    return {name for name in _NAME.findall(text) if name.lower() not in _KEYWORDS}


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("max(ledger_review_items_overdue) > 0", {"ledger_review_items_overdue"}),
        (
            'histogram_quantile(0.99, sum by (route, le) (rate(a_bucket{route!~".*[?]wait",'
            'job="$job"}[$__rate_interval]))) > 0.5 and sum by (route) (rate(a_count[5m])) > 1e-2',
            {"a_bucket", "a_count"},
        ),
        (
            "sum(rate(x_total[5m] offset 1h)) by (le) / ignoring(kind) group_left y",
            {"x_total", "y"},
        ),
        ('up{job="effect-ledger", route="/api/{effect_id}"} == 0', {"up"}),
        ("max by (scope) (h_seconds) > 4 * 3600 unless on(scope) vector(0)", {"h_seconds"}),
        ("{__name__=~'ledger_.*'}", set()),
        ("ns:metric:rate5m - delta(g[1h])", {"ns:metric:rate5m", "g"}),
    ],
)
def test_the_metric_name_reader_finds_names_and_nothing_else(expr, names):
    assert metric_names(expr) == names


@pytest.fixture
def exported(settings, alice) -> set[str]:
    """The sample names /metrics can answer with, from a real scrape after one API call: a
    family's own name for gauges, `_total` for counters, `_bucket`, `_sum` and `_count` for
    histograms (a family without samples yet is in the text with its type)."""
    settings.LEDGER_METRICS_TOKEN = TOKEN
    alice.intent()
    summary.expire()
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    summary.expire()
    assert response.status_code == 200
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
        names |= {sample.name for sample in family.samples}
    return names


def test_every_metric_the_rules_and_the_dashboard_name_is_exported(exported):
    used = {
        (f"alert {rule['alert']}", name)
        for rule in alerting_rules()
        for name in metric_names(rule["expr"])
    } | {
        (f"panel {title!r}", name)
        for title, expr in dashboard_queries()
        for name in metric_names(expr)
    }
    assert {name for _, name in used} >= {"ledger_api_request_duration_seconds_bucket", "up"}
    unknown = sorted(
        f"{where}: {name}" for where, name in used if name not in exported | PROMETHEUS_OWN
    )
    assert unknown == []


def test_every_exported_metric_is_described_on_the_metrics_page(exported):
    page = METRICS_PAGE.read_text()
    families = {re.sub(r"_(bucket|sum|count|created)$", "", name) for name in exported}
    families = {name for name in families if f"{name}_bucket" in exported or name in exported}
    missing = sorted(name for name in families if f"`{name}`" not in page)
    assert missing == []


# --- The rules -------------------------------------------------------------------------------


def test_the_rules_pass_promtools_check_and_their_unit_tests():
    checked = run_promtool("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run_promtool("test", "rules", RULE_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_a_rule_changed_under_its_tests_fails_them(tmp_path):
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    rules = RULES.read_text()
    loosened = rules.replace(
        "max(ledger_seal_lag_seconds) > 600", "max(ledger_seal_lag_seconds) > 6000"
    )
    assert loosened != rules
    (tmp_path / RULES.name).write_text(loosened)

    tested = run_promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)

    assert tested.returncode != 0
    assert "LedgerSealerBehind" in tested.stdout + tested.stderr


def test_every_alert_is_tested_firing_and_not_firing():
    cases: dict[str, set[bool]] = {}
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    names = [rule["alert"] for rule in alerting_rules()]
    assert len(names) == len(set(names))
    assert {name: cases.get(name, set()) for name in names} == {
        name: {True, False} for name in names
    }
    assert set(cases) <= set(names), "a test names an alert that does not exist"


def test_every_alert_says_how_grave_what_and_where_its_runbook_is():
    for rule in alerting_rules():
        where = rule["alert"]
        assert rule.get("labels", {}).get("severity") in SEVERITIES, where
        annotations = rule.get("annotations", {})
        assert set(annotations) == {"summary", "description", "runbook_url"}, where
        assert all(annotations[key].strip() for key in annotations), where
        url = annotations["runbook_url"]
        assert url.startswith(DOCS_SITE) and url.endswith(".html"), where
        page = DOCS / (url.removeprefix(DOCS_SITE).removesuffix(".html") + ".md")
        assert page.parent == RUNBOOKS and page.exists(), f"{where}: no page {page}"


# --- The runbooks ------------------------------------------------------------------------------


def _headings(page: Path, level: str) -> list[str]:
    return [
        line[len(level) + 1 :].strip()
        for line in page.read_text().splitlines()
        if line.startswith(level + " ")
    ]


def test_each_runbook_page_serves_one_alert_and_says_what_an_on_call_needs():
    pages = {
        DOCS
        / (
            r["annotations"]["runbook_url"].removeprefix(DOCS_SITE).removesuffix(".html") + ".md"
        ): r["alert"]
        for r in alerting_rules()
    }
    on_disk = set(RUNBOOKS.glob("*.md")) - {RUNBOOKS / "index.md"}
    assert on_disk == set(pages), "a runbook page no alert links, or one alert per page"
    for page, alert in pages.items():
        text = page.read_text()
        assert f"`{alert}`" in text, f"{page.name} does not name {alert}"
        assert _headings(page, "##") == list(RUNBOOK_SECTIONS), page.name


def test_the_runbook_index_lists_every_runbook_and_the_metrics_page_links_it():
    index = (RUNBOOKS / "index.md").read_text()
    toctree = re.search(r"```\{toctree\}\n(.*?)```", index, re.S)
    assert toctree, "the runbook index has no toctree"
    listed = {
        line.strip()
        for line in toctree.group(1).splitlines()
        if line.strip() and not line.startswith(":")
    }
    assert listed == {p.stem for p in RUNBOOKS.glob("*.md")} - {"index"}
    for rule in alerting_rules():
        assert f"`{rule['alert']}`" in index, f"the index does not list {rule['alert']}"
    assert "runbooks/index.md" in METRICS_PAGE.read_text()


# --- The dashboard -----------------------------------------------------------------------------


def test_the_dashboard_is_grafana_json_whose_panels_query_prometheus():
    board = dashboard()
    assert board["title"] and board["uid"] and board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["query"] == "prometheus"
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        cells = {(pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert panel["targets"] and len(set(refs)) == len(refs), panel["title"]
        assert all('job="$job"' in t["expr"] for t in panel["targets"]), panel["title"]


def test_every_dashboard_query_is_promql_that_promtool_parses(tmp_path):
    """Each query becomes a recording rule (Grafana's variables given values) for promtool
    to parse; a query with a syntax error fails the check, as the broken one below shows."""

    def check(queries: list[str]) -> subprocess.CompletedProcess[str]:
        rules = [
            {
                "record": f"dashboard:query_{n}",
                "expr": q.replace("$__rate_interval", "5m").replace("$job", "effect-ledger"),
            }
            for n, q in enumerate(queries)
        ]
        path = tmp_path / "dashboard-queries.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
        return run_promtool("check", "rules", path)

    queries = [expr for _, expr in dashboard_queries()]
    parsed = check(queries)
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr
    assert check([*queries, "sum by (le (rate(x[5m]))"]).returncode != 0
