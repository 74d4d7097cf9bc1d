"""Python client for Effect Ledger (depends on httpx only).

ledger = Ledger("http://127.0.0.1:8000", key, owner="executor-1")
with ledger.effect(run_id, "pay", "charge_card", "acct_42", request) as e:
    if not e.replayed:
        charge = provider.charge(request, idempotency_key=e.idempotency_key)
        e.confirm(charge["id"], charge)
"""

from ledger_client.client import EffectBlock, Ledger
from ledger_client.effect import Effect
from ledger_client.errors import (
    ApprovalPending,
    AttemptsExhausted,
    Blocked,
    EffectClosed,
    EffectKeyConflict,
    EffectRefused,
    Halted,
    LeaseLost,
    LeaseTooShort,
    LedgerClientError,
    LedgerRequestError,
    LedgerUnavailable,
    LimitExceeded,
    NeedsReview,
    OutcomeMissing,
    UsageError,
)
from ledger_client.heartbeat import Clock
from ledger_client.recovery import RecoveryItem, RecoveryPlan

__all__ = [
    "ApprovalPending",
    "AttemptsExhausted",
    "Blocked",
    "Clock",
    "Effect",
    "EffectBlock",
    "EffectClosed",
    "EffectKeyConflict",
    "EffectRefused",
    "Halted",
    "LeaseLost",
    "LeaseTooShort",
    "Ledger",
    "LedgerClientError",
    "LedgerRequestError",
    "LedgerUnavailable",
    "LimitExceeded",
    "NeedsReview",
    "OutcomeMissing",
    "RecoveryItem",
    "RecoveryPlan",
    "UsageError",
]
