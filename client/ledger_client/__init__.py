"""Python client for Effect Ledger: record intent before dispatch, run each side effect at most
once per action, and recover by asking before retrying.

The guard, under any framework's tool decorator (an adapter binds the step identity):

    @guarded(tool="charge_card")
    def charge_card(order_id: str, amount: str) -> dict:
        return payments.charge(order_id, amount, idempotency_key=current_effect().idempotency_key)

The clients, sync and async, for everything else:

    ledger = Ledger("http://127.0.0.1:8000", key, owner="executor-1")
    with ledger.effect(run_id, "pay", "charge_card", "acct_42", request) as e:
        if not e.replayed:
            charge = provider.charge(request, idempotency_key=e.idempotency_key)
            e.confirm(charge["id"], charge)

An operator's scripts use `Operator` (`ledger_client.operator`), with a personal token: the
review queue, one item with the decisions offered, and decisions under the pages' rules.
"""

from ledger_client.aio import AsyncEffectBlock, AsyncLedger
from ledger_client.behind import flush
from ledger_client.config import LedgerConfig, configure
from ledger_client.context import (
    StepIdentity,
    bind_position,
    bind_step,
    current_effect,
    current_step,
    ordinal_among,
)
from ledger_client.effect import AsyncEffect, Effect, EffectHandle
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
    LedgerNotConfigured,
    LedgerRequestError,
    LedgerUnavailable,
    LimitExceeded,
    NeedsReview,
    NotSent,
    OperatorDecided,
    OutcomeMissing,
    UsageError,
)
from ledger_client.guard import (
    GuardSpec,
    guarded,
    register_context_annotation,
    register_context_type,
)
from ledger_client.heartbeat import Clock
from ledger_client.models import (
    Approval,
    EffectPage,
    EffectRecord,
    Halt,
    Health,
    RecoveryItem,
    RecoveryPlan,
    Redacted,
    Refusal,
)
from ledger_client.operator import (
    DecisionInvalid,
    DecisionRefused,
    ItemNotFound,
    Operator,
    OperatorError,
    OperatorForbidden,
    OperatorItem,
    TokenRefused,
)
from ledger_client.sync import EffectBlock, Ledger

__all__ = [
    "Approval",
    "ApprovalPending",
    "AsyncEffect",
    "AsyncEffectBlock",
    "AsyncLedger",
    "AttemptsExhausted",
    "Blocked",
    "Clock",
    "DecisionInvalid",
    "DecisionRefused",
    "Effect",
    "EffectBlock",
    "EffectClosed",
    "EffectHandle",
    "EffectKeyConflict",
    "EffectPage",
    "EffectRecord",
    "EffectRefused",
    "GuardSpec",
    "Halt",
    "Halted",
    "Health",
    "ItemNotFound",
    "LeaseLost",
    "LeaseTooShort",
    "Ledger",
    "LedgerClientError",
    "LedgerConfig",
    "LedgerNotConfigured",
    "LedgerRequestError",
    "LedgerUnavailable",
    "LimitExceeded",
    "NeedsReview",
    "NotSent",
    "Operator",
    "OperatorDecided",
    "OperatorError",
    "OperatorForbidden",
    "OperatorItem",
    "OutcomeMissing",
    "RecoveryItem",
    "RecoveryPlan",
    "Redacted",
    "Refusal",
    "StepIdentity",
    "TokenRefused",
    "UsageError",
    "bind_position",
    "bind_step",
    "configure",
    "current_effect",
    "current_step",
    "flush",
    "guarded",
    "ordinal_among",
    "register_context_annotation",
    "register_context_type",
]
