from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from ledger.agentkeys import revoke
from ledger.limits import amount_limits
from ledger.models import (
    Agent,
    ApiKey,
    Effect,
    EffectDependency,
    EffectEvent,
    ReviewItem,
    Run,
    Tool,
)


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
        "created_at",
    )
    list_filter = ("mode", "is_active")
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
    )
    list_filter = ("read_only", "honours_key", "has_lookup")
    search_fields = ("name", "description")


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
    list_display = ("effect_key", "agent", "tool", "status", "attempt", "kind", "created_at")
    list_filter = ("status", "kind", "tool", "agent")
    search_fields = ("=id", "effect_key", "run_id", "idempotency_key", "provider_ref", "target")
    date_hierarchy = "created_at"
    list_select_related = ("agent",)
    inlines = [EventInline]


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
    """Only the assignee can be changed here. An item is opened by `ledger.reviewqueue` and
    closed by a decision (`reviews.decisions`), which records a decision effect and moves the
    target in the same transaction; closing or deleting it here would leave no trace."""

    list_display = ("effect", "reason", "opened_at", "due_at", "assignee", "resolved_at")
    list_filter = ("reason", ("resolved_at", admin.EmptyFieldListFilter))
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
    )
    list_select_related = ("effect", "assignee")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
