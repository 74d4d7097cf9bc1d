"""An adapter from an installed package, found through the `effect_ledger.providers` entry
points: loadtools holds a tool to what it declares it can back, its callback scheme settles
effects at /callbacks/{provider}, and its report format imports statements.

The package is a real distribution on sys.path (a dist-info with entry_points.txt), found by
importlib.metadata as any installed package is."""

from __future__ import annotations

import hashlib
import hmac
import importlib
import json
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client

import reconcilers.providers as providers
from ledger.effects.recovery import database_now
from ledger.models import Effect, StatementImport, StatementLine, WebhookDelivery
from ledger.policy.toolfile import ToolFileError, load
from ledger.statements import import_statement
from ledger.statements.formats import REPORT_FORMATS

pytestmark = pytest.mark.django_db

SECRET = "example-callback-secret-0123456789"
PACKAGE = '''
"""An adapter the way a team would ship one for its own provider."""
import hashlib, hmac, json
from dataclasses import dataclass
from typing import ClassVar

from ledger.statements.formats import ReportFormat
from reconcilers.providers.base import AdapterBase, Backing
from reconcilers.providers.callbacks import CallbackRefused, Settlement
from reconcilers.providers.outcomes import inconclusive


class Scheme:
    name = "example"

    def verify(self, request):
        given = request.headers.get("x-example-signature", "")
        for secret in request.secrets:
            expected = hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
            if hmac.compare_digest(expected, given):
                return expected
        raise CallbackRefused("The signature does not match.")

    def settlements(self, body):
        said = json.loads(body)
        return [Settlement(item["key"], item["status"], item["ref"]) for item in said["events"]]


def rows(text, reader):
    for number, line in enumerate(text, start=1):
        ref, key, cents, currency, when = line.rstrip("\\n").split("|")
        yield reader.row(number, [ref, key, cents, currency, "succeeded", when, None])


@dataclass
class Example(AdapterBase):
    name: ClassVar[str] = "example"
    callbacks: ClassVar = Scheme()
    report: ClassVar = ReportFormat("example_pipes", "minor", rows)

    @classmethod
    def backing(cls, config):
        return Backing(honours_key=False, lookup=True, callbacks="example", report="example_pipes")

    def lookup(self, effect):
        return inconclusive("the example provider is asked by nobody")
'''
TOOLS = """
[tools.notify]
preset = "lookup"
reconciler = "example"
webhook_provider = "example-hooks"
statements = true
statement_format = "example_pipes"
amount_path = "amount"
currency_path = "currency"
amount_unit = "major"
"""


@pytest.fixture
def installed(tmp_path: Path):
    """The package on sys.path with its dist-info, as pip would leave it."""
    site = tmp_path / "site"
    (site / "example_adapter").mkdir(parents=True)
    (site / "example_adapter" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    info = site / "example_adapter-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: example-adapter\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[effect_ledger.providers]\n"
        "example = example_adapter:Example\n"
        "manual = example_adapter:Example\n"
    )
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    providers._installed.cache_clear()
    providers.provider_class.cache_clear()
    yield
    sys.path.remove(str(site))
    sys.modules.pop("example_adapter", None)
    providers._installed.cache_clear()
    providers.provider_class.cache_clear()
    REPORT_FORMATS.pop("example_pipes", None)


def declare(tmp_path: Path, text: str) -> None:
    path = tmp_path / "tools.toml"
    path.write_text(text)
    load(path)


def test_an_installed_adapter_is_known_by_its_entry_point_and_cannot_take_a_built_in_name(
    installed,
):
    assert "example" in providers.names()
    assert providers.provider_class("example").__module__ == "example_adapter"
    assert providers.provider_class("manual").__module__ == "reconcilers.providers.base"


def test_loadtools_takes_what_the_adapter_backs_and_refuses_more(installed, tmp_path):
    declare(tmp_path, TOOLS)

    with pytest.raises(ToolFileError, match="honours_key: the example adapter speaks to a "):
        declare(tmp_path, TOOLS + "honours_key = true\n")
    with pytest.raises(ToolFileError, match="statement_format: the example adapter reads"):
        declare(tmp_path, TOOLS.replace('"example_pipes"', '"other_report"'))
    with pytest.raises(ToolFileError, match="reconciler 'exampel' is not a known adapter"):
        declare(tmp_path, TOOLS.replace('reconciler = "example"', 'reconciler = "exampel"'))


def _callback(body: dict, secret: str = SECRET):
    raw = json.dumps(body).encode()
    signature = hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    return Client().post(
        "/api/v1/callbacks/example-hooks",
        data=raw,
        content_type="application/json",
        headers={"X-Example-Signature": signature},
    )


def test_a_callback_in_the_providers_scheme_settles_the_effect_it_names(
    installed, tmp_path, alice, settings
):
    settings.LEDGER_WEBHOOK_SECRETS = {"example-hooks": SECRET}
    declare(tmp_path, TOOLS)
    effect = alice.intent(tool="notify", claim=True, request={"amount": "2.00", "currency": "EUR"})
    alice.outcome(effect["id"], effect["lease_token"], "unknown")
    events = [
        {"key": effect["idempotency_key"], "status": "confirmed", "ref": "msg_1"},
        {"key": "a-key-of-nobody", "status": "confirmed", "ref": "msg_2"},
    ]

    answer = _callback({"events": events})
    replayed = _callback({"events": events})

    assert answer.status_code == 200, answer.content
    assert answer.json() == {"settled": [effect["id"]], "ignored": 1}
    stored = Effect.objects.get(pk=effect["id"])
    assert (stored.status, stored.provider_ref) == ("confirmed", "msg_1")
    assert replayed.status_code == 401


def test_a_forged_callback_is_refused_with_nothing_written(installed, tmp_path, alice, settings):
    settings.LEDGER_WEBHOOK_SECRETS = {"example-hooks": SECRET}
    declare(tmp_path, TOOLS)
    effect = alice.intent(tool="notify", claim=True, request={"amount": "2.00", "currency": "EUR"})
    events = [{"key": effect["idempotency_key"], "status": "confirmed", "ref": "msg_1"}]

    forged = _callback({"events": events}, secret="not-the-secret")
    unknown_provider = Client().post(
        "/api/v1/callbacks/nobody", data=b"{}", content_type="application/json"
    )

    assert forged.status_code == 401
    assert unknown_provider.status_code == 404
    assert not WebhookDelivery.objects.exists()
    assert Effect.objects.get(pk=effect["id"]).status == "dispatching"


def test_a_statement_in_the_providers_report_format_is_imported(installed, tmp_path):
    declare(tmp_path, TOOLS)
    providers.register_reports()
    end = database_now() - timedelta(minutes=1)
    start = end - timedelta(hours=1)
    when = (start + timedelta(minutes=5)).isoformat()
    report = f"msg_1|key-1|250|EUR|{when}\nmsg_2|key-2|1999|EUR|{when}\n".encode()

    made = import_statement(
        "notify",
        report,
        filename="report.csv",
        period_start=start,
        period_end=end,
        provisional=False,
        by="test",
        origin="upload",
    )

    assert StatementImport.objects.get(pk=made.pk).lines == 2
    lines = StatementLine.objects.filter(statement=made).order_by("line_no")
    assert [(x.provider_ref, x.reference, x.amount_minor) for x in lines] == [
        ("msg_1", "key-1", 250),
        ("msg_2", "key-2", 1999),
    ]
