from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from ledger.audit.retention import REDACTED, REDACTED_TARGET
from ledger.containment.keys import revoke
from ledger.models import (
    Agent,
    AllTeamsGrant,
    ApiKey,
    Effect,
    EffectDependency,
    EffectEvent,
    ReviewItem,
    Run,
    Team,
    TeamMembership,
    Tool,
)
from ledger.models.statements import Incident, StatementImport, StatementLine
from ledger.policy.money import amount_limits


class ReadOnlyAdmin(admin.ModelAdmin):
    """The ledger's history is written by the ledger, never edited by hand."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fields = ("prefix", "label", "created_at", "last_used_at", "expires_at", "revoked_at")
    # Revocation is one-way: a cleared revoked_at would bring a leaked key back to life; so
    # would a cleared expiry (`manage.py rotatekey` sets it).
    readonly_fields = ("prefix", "created_at", "last_used_at", "expires_at", "revoked_at")
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False  # keys are issued with `manage.py createagent`, which shows them once


class AgentForm(forms.ModelForm):
    def clean_limit_amount_per_day(self) -> dict[str, str]:
        # Checked as `manage.py agentlimits` and tools.toml are: {"EUR": "500.00"}, exact.
        raw = self.cleaned_data["limit_amount_per_day"] or {}
        try:
            amount_limits(raw)
        except ValueError as exc:
            raise forms.ValidationError(f'{exc} (for example {{"EUR": "500.00"}})') from None
        return {currency.upper(): str(amount) for currency, amount in raw.items()}


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AgentForm
    list_display = (
        "name",
        "mode",
        "is_active",
        "limit_claims_per_minute",
        "limit_amount_per_day",
        "team",
        "created_at",
    )
    list_filter = ("mode", "is_active", "team")
    search_fields = ("name",)
    inlines = [ApiKeyInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Agent | None = None) -> list[str]:
        # The mode is chosen once: its keys carry it, and its effects were recorded under it.
        return [*super().get_readonly_fields(request, obj), *(["mode"] if obj else [])]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = (
        "prefix",
        "agent",
        "label",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("revoked_at", "expires_at")
    search_fields = ("prefix", "agent__name", "label")
    # Revocation is one-way (the action below): a cleared revoked_at would bring a leaked key
    # back to life.
    readonly_fields = (
        "agent",
        "prefix",
        "digest",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_select_related = ("agent",)
    actions = ["revoke_keys"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        # Through agentkeys.revoke, which also makes this process forget the key at once.
        revoked = sum(revoke(prefix) for prefix in queryset.values_list("prefix", flat=True))
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "classification",
        "has_lookup",
        "honours_key",
        "read_only",
        "max_attempts",
        "compensated_by",
        "reconciler",
        "team",
    )
    list_filter = ("read_only", "honours_key", "has_lookup", "team")
    search_fields = ("name", "description")


class MembershipInline(admin.TabularInline):
    """People in the team. A membership from the identity provider's claim is rewritten at each
    sign-in; one added here is kept (ADR 0014)."""

    model = TeamMembership
    extra = 0
    fields = ("user", "source", "created_at")
    readonly_fields = ("created_at",)
    autocomplete_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    """Teams, their people and their alert channels; agents and tools are given a team on
    their own pages (docs/operations/teams.md)."""

    list_display = ("name", "slug", "alert_webhook_url", "alert_slack_url", "alert_email")
    search_fields = ("name", "slug")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [MembershipInline]
    # Channel URLs are given whole (https://…); nothing is assumed about a missing scheme.
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}


@admin.register(AllTeamsGrant)
class AllTeamsGrantAdmin(admin.ModelAdmin):
    """Who sees every team's effects besides the admins (auditors, typically)."""

    list_display = ("user", "granted_at")
    search_fields = ("user__username",)
    autocomplete_fields = ("user",)


class EventInline(admin.TabularInline):
    model = EffectEvent
    fields = ("created_at", "kind", "actor", "from_status", "to_status", "reason")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("id",)

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    """Read-only, but for the legal hold, which is set and cleared by the two actions (each
    change is logged in the admin's history of the effect): a hold keeps the effect's payloads
    from retention (`ledger.audit.retention`). Not through the change form: saving it would write
    every column of the effect, its status among them, from a copy read earlier."""

    list_display = (
        "effect_key",
        "agent",
        "tool",
        "status",
        "attempt",
        "kind",
        "legal_hold",
        "created_at",
    )
    list_filter = ("status", "kind", "legal_hold", "tool", "agent")
    search_fields = ("=id", "effect_key", "run_id", "idempotency_key", "provider_ref", "target")
    date_hierarchy = "created_at"
    list_select_related = ("agent",)
    inlines = [EventInline]
    actions = ["place_legal_hold", "clear_legal_hold"]

    def has_legal_hold_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("ledger.change_effect")

    @admin.action(description="Place a legal hold (retention keeps the payloads)")
    def place_legal_hold(self, request: HttpRequest, queryset: QuerySet[Effect]) -> None:
        self._set_legal_hold(request, queryset, True)

    @admin.action(description="Clear the legal hold")
    def clear_legal_hold(self, request: HttpRequest, queryset: QuerySet[Effect]) -> None:
        self._set_legal_hold(request, queryset, False)

    place_legal_hold.allowed_permissions = ("legal_hold",)  # type: ignore[attr-defined]
    clear_legal_hold.allowed_permissions = ("legal_hold",)  # type: ignore[attr-defined]

    def _set_legal_hold(self, request: HttpRequest, queryset: QuerySet[Effect], hold: bool) -> None:
        # One conditional UPDATE of this column only; an effect retention is redacting right
        # now is held once that commits, with what is left.
        with transaction.atomic():
            changed = list(
                Effect.objects.filter(pk__in=queryset.filter(legal_hold=not hold).values("pk"))
                .select_for_update()
                .only("pk", "effect_key", "status", "request", "target")
            )
            Effect.objects.filter(pk__in=[e.pk for e in changed]).update(legal_hold=hold)
        note = "Placed a legal hold" if hold else "Cleared the legal hold"
        for effect in changed:
            self.log_change(request, effect, f"{note} (retention).")
        self.message_user(request, f"{note} on {len(changed)} effect(s).", messages.SUCCESS)
        gone = sum(e.target == REDACTED_TARGET and e.request == REDACTED for e in changed)
        if hold and gone:
            self.message_user(
                request,
                f"{gone} of them were already redacted by retention: a hold cannot bring "
                "their payloads back.",
                messages.WARNING,
            )


@admin.register(EffectEvent)
class EffectEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "effect", "kind", "actor", "from_status", "to_status", "created_at")
    list_filter = ("kind", "to_status")
    search_fields = ("=effect__id", "actor", "reason")
    list_select_related = ("effect",)


@admin.register(EffectDependency)
class EffectDependencyAdmin(ReadOnlyAdmin):
    list_display = ("downstream", "upstream")
    list_select_related = ("downstream", "upstream")


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ("run_id", "agent", "last_seq", "created_at")
    search_fields = ("run_id",)
    list_select_related = ("agent",)


@admin.register(ReviewItem)
class ReviewItemAdmin(admin.ModelAdmin):
    """Only the assignee can be changed here. An item is opened by `ledger.rules.reviewqueue`
    and
    closed by a decision (`reviews.decisions`), which records a decision effect and moves the
    target in the same transaction; closing or deleting it here would leave no trace."""

    list_display = (
        "effect",
        "reason",
        "severity",
        "opened_at",
        "due_at",
        "assignee",
        "resolved_at",
    )
    list_filter = ("reason", "severity", ("resolved_at", admin.EmptyFieldListFilter))
    search_fields = ("=effect__id", "effect__effect_key")
    readonly_fields = (
        "effect",
        "reason",
        "opened_at",
        "due_at",
        "resolved_at",
        "resolved_by",
        "resolution",
        "decision",
        "severity",
        "tool",
        "agent",
        "run_id",
        "effect_created_at",
    )
    list_select_related = ("effect", "assignee")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


# Provider statements (`ledger.statements`): read-only. Imports come in through the command,
# the upload form or the daily fetch; an incident closes by an acknowledge decision only.
@admin.register(StatementImport)
class StatementImportAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "tool",
        "period_start",
        "period_end",
        "provisional",
        "origin",
        "imported_by",
        "phase",
        "lines",
        "confirmed",
        "orphans",
        "created_at",
    )
    list_filter = ("tool", "provisional", "origin", "phase")
    search_fields = ("=sha256", "filename", "imported_by")


@admin.register(StatementLine)
class StatementLineAdmin(ReadOnlyAdmin):
    list_display = (
        "statement",
        "line_no",
        "provider_ref",
        "type",
        "status",
        "amount_minor",
        "currency",
        "occurred_at",
        "effect",
        "outcome",
    )
    list_filter = ("type", "status", "outcome")
    search_fields = ("=provider_ref", "=reference", "=effect__id")
    raw_id_fields = ("statement", "effect", "removed_by")


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "kind",
        "tool",
        "severity",
        "opened_at",
        "due_at",
        "acknowledged_at",
        "acknowledged_by",
    )
    list_filter = ("kind", "tool", "severity", ("acknowledged_at", admin.EmptyFieldListFilter))
    raw_id_fields = ("line", "decision")
