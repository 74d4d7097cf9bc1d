"""Tool policies: what the ledger may do with an effect of a given tool."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal

from django.conf import settings

from ledger.errors import ValidationFailed
from ledger.models import Mode, Tool
from ledger.policy import configversion
from ledger.policy.configversion import VersionedCache
from ledger.policy.money import amount_limits
from ledger.policy.redaction import Redactor

PRESETS: dict[str, dict[str, bool]] = {
    "read_only": {"read_only": True, "honours_key": False, "has_lookup": False},
    "idempotent": {"read_only": False, "honours_key": True, "has_lookup": False},
    "lookup": {"read_only": False, "honours_key": False, "has_lookup": True},
    "unsafe": {"read_only": False, "honours_key": False, "has_lookup": False},
}


@dataclass(frozen=True)
class Policy:
    name: str
    read_only: bool
    honours_key: bool
    key_ttl: timedelta | None
    has_lookup: bool
    confirm_within: timedelta | None
    settle_after: timedelta | None
    compensated_by: str
    max_attempts: int
    redactor: Redactor
    mode: str = Mode.LIVE
    # Limits (`ledger.rules.limits`): claims per minute, and {currency: minor units} per 24 h.
    limit_claims_per_minute: int | None = None
    limit_amount_per_day: Mapping[str, int] = field(default_factory=dict)
    amount_path: str = ""
    currency_path: str = ""
    # Four-eyes threshold (`ledger.rules.four_eyes`), in major units of the request's
    # currency.
    approve_above: Decimal | None = None
    # The provider's record (`ledger.rules.lookup_absence`): see the Tool model.
    call_timeout: timedelta | None = None
    search_lag: timedelta | None = None
    lookup_proves_absence: bool = False
    lookup_horizon: timedelta | None = None
    halt_on_duplicate: bool = False
    # As a compensating tool: an agent's compensations per parent (`ledger.effects.compensation`).
    compensations_per_parent: int = 1
    # The business key (`ledger.effects.businesskeys`): request paths that identify the action.
    key_fields: tuple[str, ...] = ()

    @classmethod
    def from_tool(cls, tool: Tool) -> Policy:
        return cls(
            name=tool.name,
            read_only=tool.read_only,
            honours_key=tool.honours_key,
            key_ttl=tool.key_ttl,
            has_lookup=tool.has_lookup,
            confirm_within=tool.confirm_within,
            settle_after=tool.settle_after,
            compensated_by=tool.compensated_by,
            max_attempts=tool.max_attempts,
            redactor=Redactor.for_tool(tool.card_scan_allow, tool.redact_paths),
            mode=tool.mode,
            limit_claims_per_minute=tool.limit_claims_per_minute,
            limit_amount_per_day=amount_limits(tool.limit_amount_per_day),
            amount_path=tool.amount_path,
            currency_path=tool.currency_path,
            approve_above=tool.approve_above,
            call_timeout=tool.call_timeout,
            search_lag=tool.search_lag,
            lookup_proves_absence=tool.lookup_proves_absence,
            lookup_horizon=tool.lookup_horizon,
            halt_on_duplicate=tool.halt_on_duplicate,
            compensations_per_parent=tool.compensations_per_parent,
            key_fields=tuple(tool.key_fields or ()),
        )

    def lease_for(self, requested: int | None) -> int:
        """The lease a claim gets: as requested, else the default, never shorter than the
        tool's `call_timeout`: a provider call must be able to finish inside the lease it
        started on, since fencing stops outcome writes, not calls
        (`ledger.rules.lookup_absence`). A
        request for less is refused (422)."""
        floor = math.ceil(self.call_timeout.total_seconds()) if self.call_timeout else 0
        if requested is None:
            return max(settings.LEDGER_DEFAULT_LEASE_SECONDS, floor)
        if requested < floor:
            raise ValidationFailed(
                f"Tool {self.name!r} declares a call_timeout of {floor} s: a shorter lease could "
                "run out while its provider call is still in flight.",
                {"lease_seconds": f"at least {floor}"},
            )
        return requested

    @classmethod
    def unsafe(cls, name: str) -> Policy:
        """An undeclared tool: no capability, default policy."""
        return cls(
            name=name,
            read_only=False,
            honours_key=False,
            key_ttl=None,
            has_lookup=False,
            confirm_within=None,
            settle_after=None,
            compensated_by="",
            max_attempts=settings.LEDGER_DEFAULT_MAX_ATTEMPTS,
            redactor=Redactor(),
        )


# Tools change rarely and every request reads one: each process keeps the policies it read,
# tagged with the configuration version, until the version moves (`ledger.policy.configversion`).
_cache: VersionedCache[Policy] = VersionedCache()


def policy_for(name: str) -> Policy:
    # Read before the tool: a change committed in between moves the version off this one.
    version = configversion.current()
    if (policy := _cache.get(name, version)) is not None:
        return policy
    tool = Tool.objects.filter(name=name).first()
    policy = Policy.from_tool(tool) if tool else Policy.unsafe(name)
    _cache.put(name, version, policy)
    return policy


def policies_for(names: set[str]) -> dict[str, Policy]:
    return {name: policy_for(name) for name in names}
