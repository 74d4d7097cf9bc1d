"""Who may call and what tools may do: agents, their keys, tools, the teams that own agents and
tools (and the people in them), and the configuration version that tells every process when any
of them changed."""

from __future__ import annotations

import pgtrigger
from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now


class ConfigVersion(models.Model):
    """One row: the version of what every process remembers between requests (tools, API keys,
    agents' `is_active`). Triggers on those tables move it in the changing transaction, so
    raw SQL and other processes move it too; a process drops what it remembered once the
    version it reads differs from the one its copies were read under
    (`ledger.policy.configversion`).
    """

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    version = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="configversion_one_row")]

    def __str__(self) -> str:
        return f"configuration version {self.version}"


# Each bump draws from a sequence: a version never comes back, not even after the row is
# deleted (a test database's flush) and written again, and two statements of one transaction
# move it twice. Readers compare for equality only, so concurrent bumps may commit in any order.
CONFIG_VERSION_SEQUENCE = "ledger_configversion_seq"
_BUMP_CONFIG_VERSION = (
    f"INSERT INTO {ConfigVersion._meta.db_table} (id, version, changed_at) "
    f"VALUES (1, nextval('{CONFIG_VERSION_SEQUENCE}'), now()) "
    "ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, changed_at = EXCLUDED.changed_at; "
    "RETURN NULL;"
)


def _bumps_config_version(name: str) -> pgtrigger.Trigger:
    """Every statement that changes the table moves the version, TRUNCATE included."""
    return pgtrigger.Trigger(
        name=name,
        level=pgtrigger.Statement,
        when=pgtrigger.After,
        operation=pgtrigger.Insert | pgtrigger.Update | pgtrigger.Delete | pgtrigger.Truncate,
        func=_BUMP_CONFIG_VERSION,
    )


class Mode(models.TextChoices):
    """Test agents may name only test tools; a key's prefix says its agent's mode."""

    TEST = "test", "test"
    LIVE = "live", "live"


class Team(models.Model):
    """A group of people who own some agents and tools: they see and decide only what those
    produced (`ledger.policy.teams`, ADR 0014). Its alert channels, when set, take the alerts
    about what it owns instead of the global ones (`reviews.alerts.routing`)."""

    name = models.CharField(max_length=100, unique=True)
    slug = models.SlugField(max_length=100, unique=True)
    # Where this team's alerts go; all blank: the global channels (LEDGER_ALERT_*).
    alert_webhook_url = models.URLField(max_length=500, blank=True, default="", db_default="")
    alert_slack_url = models.URLField(max_length=500, blank=True, default="", db_default="")
    alert_email = models.EmailField(max_length=254, blank=True, default="", db_default="")
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="TeamMembership", related_name="ledger_teams", blank=True
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]
        # Whether any team exists is remembered per configuration version: a deployment
        # without teams pays no query for them (`ledger.policy.teams.any_team`).
        triggers = [_bumps_config_version("team_bumps_config")]

    def __str__(self) -> str:
        return self.name

    @property
    def has_channels(self) -> bool:
        return bool(self.alert_webhook_url or self.alert_slack_url or self.alert_email)

    def clean(self) -> None:
        """The rules of the global channels (config/settings.py): an http(s) URL, and a JSON
        webhook only while the ledger signs its alerts (LEDGER_ALERT_WEBHOOK_SECRET, 16+
        characters), since its receiver checks the signature. A Slack URL is its own secret."""
        from django.core.exceptions import ValidationError

        errors = {}
        for name in ("alert_webhook_url", "alert_slack_url"):
            url = getattr(self, name)
            if url and not url.startswith(("https://", "http://")):
                errors[name] = "Give an http(s) URL."
        if self.alert_webhook_url and len(settings.LEDGER_ALERT_WEBHOOK_SECRET) < 16:
            errors.setdefault(
                "alert_webhook_url",
                "A JSON webhook needs LEDGER_ALERT_WEBHOOK_SECRET (16+ characters) to be signed.",
            )
        if errors:
            raise ValidationError(errors)


class MembershipSource(models.TextChoices):
    """Where a membership came from: the identity provider's claim is rewritten at each sign-in,
    what an admin set by hand is kept until an admin removes it."""

    CLAIM = "claim", "identity provider claim"
    ADMIN = "admin", "set by an admin"


class TeamMembership(models.Model):
    """A person in a team, once per source: the same team may come from both."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="team_memberships"
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    source = models.CharField(
        max_length=5, choices=MembershipSource.choices, default=MembershipSource.ADMIN
    )
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "team", "source"], name="teammembership_once_per_source"
            )
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.source})"


class AllTeamsGrant(models.Model):
    """The "all teams" grant: its holder (an auditor, say) sees every team's effects. A row of
    its own rather than a group, so that mapping roles from a claim never drops it by accident;
    admins see everything without one."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="all_teams_grant"
    )
    granted_at = models.DateTimeField(db_default=Now())

    def __str__(self) -> str:
        return f"{self.user} sees all teams"


class Agent(models.Model):
    """A machine client. Effects are recorded under the agent whose key made the call."""

    name = models.CharField(max_length=100, unique=True)
    is_active = models.BooleanField(default=True)
    # Set at creation (`createagent --mode`); its keys carry it (`elk_test_…`, `elk_live_…`).
    mode = models.CharField(
        max_length=4, choices=Mode.choices, default=Mode.LIVE, db_default=Mode.LIVE
    )
    created_at = models.DateTimeField(db_default=Now())
    # Limits an admin sets (the admin, `manage.py agentlimits`); read by every claim of the
    # agent's effects (`ledger.rules.limits`). NULL / {}: no limit. Amounts as {"EUR":
    # "500.00"}.
    limit_claims_per_minute = models.PositiveIntegerField(null=True, blank=True)
    limit_amount_per_day = models.JSONField(default=dict, db_default={}, blank=True)
    # The team that owns this agent's effects unless their tool has a team (ADR 0014). NULL:
    # no team; its effects are seen by every reader, as before teams.
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="agents"
    )

    class Meta:
        triggers = [
            # Deactivating an agent refuses its keys everywhere, and so does changing its mode
            # (a key's mode must match its agent's). A new agent has no key yet, and deleting
            # one deletes its keys, which moves the version on their own table.
            pgtrigger.Trigger(
                name="agent_active_bumps_config",
                level=pgtrigger.Row,
                when=pgtrigger.After,
                operation=pgtrigger.UpdateOf("is_active", "mode"),
                condition=pgtrigger.AnyChange("is_active", "mode"),
                func=_BUMP_CONFIG_VERSION,
            ),
        ]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A bearer key: shown once at creation, stored as prefix + SHA-256 digest, revocable."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="keys")
    # The public part of the key, unique, used to find the row (the unique index serves it).
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Refused from then on (`rotatekey --expire-old-after`); checked by the authenticating query.
    expires_at = models.DateTimeField(null=True, blank=True)
    # At most once a minute, inside a write the call makes anyway (`ledger.policy.keyuse`).
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        triggers = [
            # What authentication reads moves the version; `last_used_at` and `label` do not,
            # or every key's first call of a minute would empty every process's caches.
            pgtrigger.Trigger(
                name="apikey_bumps_config",
                level=pgtrigger.Statement,
                when=pgtrigger.After,
                operation=pgtrigger.Insert
                | pgtrigger.UpdateOf("agent_id", "prefix", "digest", "revoked_at", "expires_at")
                | pgtrigger.Delete
                | pgtrigger.Truncate,
                func=_BUMP_CONFIG_VERSION,
            )
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent})"


class Tool(models.Model):
    """What a tool can do when something goes wrong, and its policy.

    Capabilities rather than one class: `read_only`, `honours_key` (with `key_ttl`, how long
    the provider remembers keys) and `has_lookup`. A tool nobody declared is treated as
    `unsafe`: no capability at all.
    """

    name = models.CharField(max_length=100, unique=True)
    description = models.CharField(max_length=500, blank=True)
    read_only = models.BooleanField(default=False)
    honours_key = models.BooleanField(default=False)
    key_ttl = models.DurationField(null=True, blank=True)
    has_lookup = models.BooleanField(default=False)
    confirm_within = models.DurationField(null=True, blank=True)
    settle_after = models.DurationField(null=True, blank=True)
    compensated_by = models.CharField(max_length=100, blank=True)
    reconciler = models.CharField(max_length=100, blank=True)
    reconciler_config = models.JSONField(default=dict, blank=True)
    # The provider (a name in LEDGER_WEBHOOK_SECRETS) whose signed callbacks may settle this
    # tool's effects; blank: no callback can.
    webhook_provider = models.CharField(max_length=100, blank=True)
    # The provider's own report format its statements come in (`ledger.statements.formats`);
    # blank: the ledger's own columns.
    statement_format = models.CharField(max_length=100, blank=True, db_default="")
    max_attempts = models.PositiveSmallIntegerField(default=3)
    # As a compensating tool: how many compensations an agent may record against one parent
    # (partial refunds); operators are not counted (`ledger/sql/compensations.sql`).
    compensations_per_parent = models.PositiveSmallIntegerField(default=1, db_default=1)
    escalate_after = models.DurationField()
    # How long a review item on this tool's effects may stay open: its `due_at`, which the
    # alerts count down to. NULL: LEDGER_RESOLVE_WITHIN.
    resolve_within = models.DurationField(null=True, blank=True)
    # The provider's back-office window: how long its own record stays correctable (a void, a
    # refund), from the effect's creation. A review item is due when it closes, if that comes
    # before `resolve_within` (`ledger.rules.reviewqueue`).
    backoffice_window = models.DurationField()
    retention = models.DurationField()
    # Field names exempt from the card-number scan (a 13-digit millisecond timestamp).
    card_scan_allow = models.JSONField(default=list, blank=True)
    # Dotted paths into the request/response that are always tokenized ("customer.ssn").
    redact_paths = models.JSONField(default=list, blank=True)
    # The business key (`ledger.effects.businesskeys`): dotted paths into the request that
    # identify the action ("order_id"). When set, the effect key is derived from their values
    # on the server, so the same action asked again under a new call id is the same effect.
    key_fields = models.JSONField(default=list, db_default=[], blank=True)
    # Only a test tool may be named by a test agent (`ledger.effects.intents.check_mode`).
    mode = models.CharField(
        max_length=4, choices=Mode.choices, default=Mode.LIVE, db_default=Mode.LIVE
    )
    # Limits on claims of this tool's effects (`ledger.rules.limits`): NULL / {}: none.
    # Amounts per currency as exact decimal strings ({"EUR": "500.00"}); they need the two paths
    # below.
    limit_claims_per_minute = models.PositiveIntegerField(null=True, blank=True)
    limit_amount_per_day = models.JSONField(default=dict, db_default={}, blank=True)
    # Dotted paths into the request where its amount and currency are ("payment.amount").
    amount_path = models.CharField(max_length=200, blank=True, db_default="")
    currency_path = models.CharField(max_length=200, blank=True, db_default="")
    # Four-eyes (`ledger.rules.four_eyes`): an intent whose amount is above this (major units,
    # exact) waits in awaiting_approval for a second operator. NULL: never.
    approve_above = models.DecimalField(max_digits=24, decimal_places=6, null=True, blank=True)
    # The provider's own record (`ledger.rules.lookup_absence`, `ledger.statements`).
    # The longest one provider call may take: no call starts on a lease with less left.
    call_timeout = models.DurationField(null=True, blank=True)
    # How long after a request the provider's search may still not show it.
    search_lag = models.DurationField(null=True, blank=True)
    # The provider's search is complete for requests older than settle_after: a not-found
    # taken late enough, and within lookup_horizon of the request, proves it never arrived.
    lookup_proves_absence = models.BooleanField(default=False, db_default=False)
    lookup_horizon = models.DurationField(null=True, blank=True)
    # Statements of what the provider did (`manage.py importstatement`, the upload form, the
    # adapter's fetch_statement on a daily schedule where `fetch_statements` is set).
    statements = models.BooleanField(default=False, db_default=False)
    fetch_statements = models.BooleanField(default=False, db_default=False)
    # {our column: the file's column} and {provider status: succeeded|failed|pending}.
    statement_columns = models.JSONField(default=dict, db_default={}, blank=True)
    statement_status = models.JSONField(default=dict, db_default={}, blank=True)
    # What a statement line's `reference` holds: our idempotency key, or the effect id.
    statement_reference = models.CharField(
        max_length=16,
        choices=[("idempotency_key", "idempotency key"), ("effect_id", "effect id")],
        default="idempotency_key",
        db_default="idempotency_key",
    )
    # Clock difference allowed between the provider's record and ours around a dispatch.
    statement_skew = models.DurationField(null=True, blank=True)
    # Whether the request's amount is in major units ("12.50") or minor units (1250).
    amount_unit = models.CharField(
        max_length=5,
        choices=[("major", "major"), ("minor", "minor")],
        blank=True,
        db_default="",
    )
    # A duplicate found at the provider halts the tool (`ledger.containment.halts`).
    halt_on_duplicate = models.BooleanField(default=False, db_default=False)
    # The team that owns this tool's effects, statements, incidents, halts and limits (ADR
    # 0014). NULL: no team; its halts and limits are the admins' alone.
    team = models.ForeignKey(
        Team, on_delete=models.SET_NULL, null=True, blank=True, related_name="tools"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        triggers = [_bumps_config_version("tool_bumps_config")]

    def __str__(self) -> str:
        return self.name

    @property
    def classification(self) -> str:
        if self.read_only:
            return "read_only"
        if self.honours_key and self.has_lookup:
            return "idempotent+lookup"
        if self.honours_key:
            return "idempotent"
        if self.has_lookup:
            return "lookup"
        return "unsafe"
