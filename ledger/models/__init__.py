"""The ledger's models, by what they hold: `config` (agents, keys, tools, teams), `effects` (the
ledger and its events), `audit` (seals, exports), `review` (items that need a person) and
`containment` (alerts, halts, limit counters). Import them from here."""

from ledger.models.audit import AuditExport, EventSeal
from ledger.models.config import (
    CONFIG_VERSION_SEQUENCE,
    Agent,
    AllTeamsGrant,
    ApiKey,
    ConfigVersion,
    MembershipSource,
    Mode,
    Team,
    TeamMembership,
    Tool,
)
from ledger.models.containment import (
    Alert,
    AlertKind,
    AmountCharge,
    Halt,
    HaltScope,
    LimitCounter,
    RetryProposal,
)
from ledger.models.counts import EffectCount, EffectCountDelta
from ledger.models.effects import (
    Effect,
    EffectDependency,
    EffectEvent,
    EventKind,
    RequestedBy,
    Run,
    WebhookDelivery,
)
from ledger.models.restore import KeyFingerprint, RestoreSource, RestoreWindow
from ledger.models.review import MACHINE_CLOSES, SEVERITY, Reason, ReviewItem, Severity
from ledger.models.statements import (
    Incident,
    IncidentKind,
    LineStatus,
    LineType,
    StatementImport,
    StatementLine,
)

__all__ = [
    "CONFIG_VERSION_SEQUENCE",
    "MACHINE_CLOSES",
    "SEVERITY",
    "Agent",
    "Alert",
    "AlertKind",
    "AllTeamsGrant",
    "AmountCharge",
    "ApiKey",
    "AuditExport",
    "ConfigVersion",
    "Effect",
    "EffectCount",
    "EffectCountDelta",
    "EffectDependency",
    "EffectEvent",
    "EventKind",
    "EventSeal",
    "Halt",
    "HaltScope",
    "Incident",
    "IncidentKind",
    "KeyFingerprint",
    "LimitCounter",
    "LineStatus",
    "LineType",
    "MembershipSource",
    "Mode",
    "Reason",
    "RequestedBy",
    "RestoreSource",
    "RestoreWindow",
    "RetryProposal",
    "ReviewItem",
    "Run",
    "Severity",
    "StatementImport",
    "StatementLine",
    "Team",
    "TeamMembership",
    "Tool",
    "WebhookDelivery",
]
