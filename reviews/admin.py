"""People in the admin: an admin links accounts of one human by putting them in one person."""

from __future__ import annotations

from django.contrib import admin

from reviews.models import Account, Identity, Person


class AccountInline(admin.TabularInline):
    model = Account
    extra = 1
    raw_id_fields = ["user"]


@admin.register(Person)
class PersonAdmin(admin.ModelAdmin):
    list_display = ["__str__", "created_at"]
    search_fields = ["name", "accounts__user__username"]
    inlines = [AccountInline]


@admin.register(Identity)
class IdentityAdmin(admin.ModelAdmin):
    """Bindings to the identity provider: made by signing in, read here, never edited (an
    edited subject would hand the account to someone else)."""

    list_display = ["user", "subject", "issuer", "last_seen_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["issuer", "subject", "user", "created_at", "last_seen_at"]

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
