"""Tool policies: what the ledger may do with an effect of a given tool."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

from ledger.models import Tool
from ledger.redaction import Redactor

PRESETS: dict[str, dict[str, bool]] = {
    "read_only": {"read_only": True, "honours_key": False, "has_lookup": False},
    "idempotent": {"read_only": False, "honours_key": True, "has_lookup": False},
    "lookup": {"read_only": False, "honours_key": False, "has_lookup": True},
    "unsafe": {"read_only": False, "honours_key": False, "has_lookup": False},
}


@dataclass(frozen=True)
class Policy:
    name: str
    declared: bool
    read_only: bool
    honours_key: bool
    key_ttl: timedelta | None
    has_lookup: bool
    confirm_within: timedelta | None
    settle_after: timedelta | None
    compensated_by: str
    max_attempts: int
    escalate_after: timedelta
    redactor: Redactor

    @classmethod
    def from_tool(cls, tool: Tool) -> Policy:
        return cls(
            name=tool.name,
            declared=True,
            read_only=tool.read_only,
            honours_key=tool.honours_key,
            key_ttl=tool.key_ttl,
            has_lookup=tool.has_lookup,
            confirm_within=tool.confirm_within,
            settle_after=tool.settle_after,
            compensated_by=tool.compensated_by,
            max_attempts=tool.max_attempts,
            escalate_after=tool.escalate_after,
            redactor=Redactor.for_tool(tool.card_scan_allow, tool.redact_paths),
        )

    @classmethod
    def unsafe(cls, name: str) -> Policy:
        """An undeclared tool: no capability, default policy."""
        return cls(
            name=name,
            declared=False,
            read_only=False,
            honours_key=False,
            key_ttl=None,
            has_lookup=False,
            confirm_within=None,
            settle_after=None,
            compensated_by="",
            max_attempts=settings.LEDGER_DEFAULT_MAX_ATTEMPTS,
            escalate_after=timedelta(seconds=settings.LEDGER_ESCALATE_AFTER),
            redactor=Redactor(),
        )


def policy_for(name: str) -> Policy:
    tool = Tool.objects.filter(name=name).first()
    return Policy.from_tool(tool) if tool else Policy.unsafe(name)


def policies_for(names: set[str]) -> dict[str, Policy]:
    found = {t.name: Policy.from_tool(t) for t in Tool.objects.filter(name__in=names)}
    return {name: found.get(name) or Policy.unsafe(name) for name in names}
