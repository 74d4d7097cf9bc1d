"""People in the admin: an admin links accounts of one human by putting them in one person, and
ends an account's binding to the identity provider only by the recorded action, with a reason."""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from ledger.errors import ValidationFailed
from reviews.models import Account, Identity, Person
from reviews.sso import people


class AccountInline(admin.TabularInline):
    model = Account
    extra = 1
    raw_id_fields = ["user"]


@admin.register(Person)
class PersonAdmin(admin.ModelAdmin):
    list_display = ["__str__", "created_at"]
    search_fields = ["name", "accounts__user__username"]
    inlines = [AccountInline]


class UnbindForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Recorded with the decision, in the audit chain.",
    )


@admin.register(Identity)
class IdentityAdmin(admin.ModelAdmin):
    """Bindings to the identity provider: made by signing in, read here, never edited (an
    edited subject would hand the account to someone else) and never deleted (that would lock
    the person out with no trace). The one way to end a binding is the action, which asks for a
    reason and records it (`reviews.sso.people.unbind`)."""

    list_display = ["user", "subject", "issuer", "last_seen_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["issuer", "subject", "user", "created_at", "last_seen_at"]
    actions = ["unbind"]

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    @admin.action(description="Unbind from the identity provider (asks for a reason)")
    def unbind(self, request: HttpRequest, queryset: QuerySet[Identity]) -> TemplateResponse | None:
        """The first POST shows the form; the second, with a reason, unbinds and records each
        binding (400 and the form again without one)."""
        form = UnbindForm(request.POST if "apply" in request.POST else None)
        if form.is_bound and form.is_valid():
            try:
                done = self._unbind(request, queryset, form.cleaned_data["reason"])
            except ValidationFailed as exc:
                form.add_error("reason", exc.detail)
            else:
                self.message_user(
                    request, f"Unbound {done} account(s); each is recorded.", messages.SUCCESS
                )
                return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Unbind from the identity provider",
            "opts": self.model._meta,
            "identities": queryset.select_related("user"),
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(
            request,
            "admin/reviews/identity/unbind.html",
            context,
            status=400 if form.is_bound else 200,
        )

    def _unbind(self, request: HttpRequest, queryset: QuerySet[Identity], reason: str) -> int:
        by = f"operator:{request.user.get_username()}"
        done = 0
        for identity in queryset.select_related("user"):
            if people.unbind(identity, reason=reason, by=by):
                done += 1
                note = f"Unbound from {identity.subject} at {identity.issuer}: {reason}"
                self.log_change(request, identity.user, note)
        return done

    unbind.allowed_permissions = ("change",)  # type: ignore[attr-defined]
