"""The ledger's models, by what they hold: `config` (agents, keys, tools), `effects` (the ledger
and its events), `audit` (seals, exports), `review` (items that need a person) and
`containment` (alerts, halts). Import them from here."""

from ledger.models.audit import AuditExport, EventSeal
from ledger.models.config import CONFIG_VERSION_SEQUENCE, Agent, ApiKey, ConfigVersion, Mode, Tool
from ledger.models.containment import Alert, AlertKind, Halt, HaltScope
from ledger.models.effects import (
    Effect,
    EffectDependency,
    EffectEvent,
    EventKind,
    Run,
    WebhookDelivery,
)
from ledger.models.review import Reason, ReviewItem

__all__ = [
    "CONFIG_VERSION_SEQUENCE",
    "Agent",
    "Alert",
    "AlertKind",
    "ApiKey",
    "AuditExport",
    "ConfigVersion",
    "Effect",
    "EffectDependency",
    "EffectEvent",
    "EventKind",
    "EventSeal",
    "Halt",
    "HaltScope",
    "Mode",
    "Reason",
    "ReviewItem",
    "Run",
    "Tool",
    "WebhookDelivery",
]
