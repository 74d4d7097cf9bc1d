"""No key, password or card number in any log line: every record logged during the suite is
kept and scanned when the session ends.

A handler on the root logger formats each record as production does (JSON, with the request
context) but without the formatter's scrubbing, so a secret handed to a logger is found even
though production's formatter would have masked it: other handlers (an error tracker, a log
shipper reading records) get what the caller passed. A leak fails the run loudly, listing the
lines, whatever the tests themselves said.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator

import pytest
from django.conf import settings

from ledger.observability.jsonlog import JsonFormatter
from ledger.observability.logcontext import ContextFilter
from ledger.policy.redaction import holds_issued_card, scrub_cards

# A whole agent key, secret part included (`elk_<prefix>` alone is its public name).
AGENT_KEY = re.compile(r"elk_(?:[a-z]+_)?[0-9a-f]{12}_[A-Za-z0-9_-]{20,}")
# Ids made of digit groups are not card numbers, whatever Luhn says of their digits; nor are
# numbers outside the card issuers' ranges (a millisecond timestamp in a run id).
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class CapturedLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.NOTSET)
        self.setFormatter(JsonFormatter(scrubbed=False))
        self.addFilter(ContextFilter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def known_secrets() -> list[str]:
    """The secret values of this run: the settings' keys and the personas' password."""
    from tests.helpers import PASSWORD

    values = [settings.SECRET_KEY, PASSWORD]
    values += [secret.decode() for secret in settings.LEDGER_KEYS.values()]
    values += list(settings.LEDGER_WEBHOOK_SECRETS.values())
    values += [getattr(settings, "LEDGER_METRICS_TOKEN", "")]
    return [value for value in values if len(value) >= 8]


def find_secrets(lines: Iterable[str], secrets: Iterable[str]) -> list[tuple[str, str]]:
    """(what, line) for each line holding a known secret, a whole agent key or a card number."""
    secrets = list(secrets)
    found = []
    for line in lines:
        if AGENT_KEY.search(line):
            found.append(("an agent key", line))
        elif any(secret in line for secret in secrets):
            found.append(("a password or secret", line))
        elif holds_issued_card(_UUID.sub("-", line)):
            found.append(("a card number", line))
    return found


def _masked(line: str) -> str:
    for secret in known_secrets():
        line = line.replace(secret, "<SECRET>")
    return scrub_cards(AGENT_KEY.sub("<AGENT KEY>", line))


_captured = CapturedLogs()


@pytest.fixture(scope="session", autouse=True)
def _capture_logs() -> Iterator[CapturedLogs]:
    # After Django's setup: its dictConfig replaces the root logger's handlers.
    root = logging.getLogger()
    root.addHandler(_captured)
    yield _captured
    root.removeHandler(_captured)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    found = [(what, _masked(line)) for what, line in find_secrets(_captured.lines, known_secrets())]
    if hasattr(config, "workeroutput"):
        # A pytest-xdist worker: its verdict goes to the controller, whose exit status counts
        # (a worker's own does not), already masked.
        config.workeroutput["logscan"] = {"lines": len(_captured.lines), "leaks": found}
        return
    _scanned["lines"] += len(_captured.lines)
    _scanned["leaks"] += found
    _report(session, _scanned["lines"], _scanned["leaks"])


# What the workers found (pytest-xdist's controller only), with the controller's own lines.
_scanned: dict = {"lines": 0, "leaks": []}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist: a worker finished; its log scan comes with it."""
    scan = getattr(node, "workeroutput", {}).get("logscan")
    if scan is None:
        # A worker that died before scanning cannot vouch for its lines.
        scan = {"lines": 0, "leaks": [("an unscanned worker", str(error or node))]}
    _scanned["lines"] += scan["lines"]
    _scanned["leaks"] += [tuple(leak) for leak in scan["leaks"]]


def _report(session: pytest.Session, lines: int, leaks: list[tuple[str, str]]) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if not leaks:
        if reporter is not None:
            reporter.write_line(f"log scan: {lines} log lines, no secrets found")
        return
    if reporter is not None:
        reporter.write_sep("=", f"SECRETS IN {len(leaks)} LOG LINES", red=True, bold=True)
        for what, line in leaks[:50]:
            # Where, not what: the secret itself is not repeated into the run's output.
            reporter.write_line(f"{what} in: {line[:2000]}", red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
