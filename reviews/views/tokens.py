"""The API tokens page: a person's own operator tokens (`reviews.operatorapi.tokens`), made with
a name, scopes, an optional restriction to some of their teams and an expiry; the token itself
shown once, on the answer that made it; listed with their last use; revoked."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from ledger.errors import LedgerError, ValidationFailed
from reviews.access.checks import actor
from reviews.models import OperatorToken, TokenScope
from reviews.operatorapi import tokens

DEFAULT_DAYS = 30


class TokenForm(forms.Form):
    name = forms.CharField(
        max_length=100, help_text="What uses it, to tell your tokens apart (“on-call script”)."
    )
    scopes = forms.MultipleChoiceField(
        choices=[
            (TokenScope.READ, "read: the review queue, an item and the decisions it offers"),
            (TokenScope.DECIDE, "decide: take decisions, under the page's rules"),
        ],
        widget=forms.CheckboxSelectMultiple,
        initial=[TokenScope.READ],
    )
    teams = forms.TypedMultipleChoiceField(
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None chosen: all of your teams, as they are when the token is used.",
    )
    expires_in_days = forms.IntegerField(
        min_value=1,
        max_value=tokens.MAX_DAYS,
        initial=DEFAULT_DAYS,
        label="Expires in (days)",
        help_text=f"At most {tokens.MAX_DAYS} days.",
    )

    def __init__(self, *args: object, user: User, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        offered = tokens.teams_offered(user)
        self.fields["teams"].choices = [(t.pk, t.name) for t in offered]
        if not offered:
            del self.fields["teams"]


def _page(
    request: HttpRequest, form: TokenForm, made: tuple[OperatorToken, str] | None = None
) -> HttpResponse:
    mine = tokens.tokens_of(request.user)
    context = {"form": form, "tokens": mine, "made": made, "max_days": tokens.MAX_DAYS}
    return render(request, "reviews/tokens.html", context, status=422 if form.errors else 200)


@require_http_methods(["GET", "POST"])
@actor
def tokens_page(request: HttpRequest) -> HttpResponse:
    """GET lists the person's tokens; POST makes one and shows it, this once."""
    user = request.user
    if request.method == "GET":
        return _page(request, TokenForm(user=user))
    form = TokenForm(request.POST, user=user)
    if not form.is_valid():
        return _page(request, form)
    data = form.cleaned_data
    try:
        made = tokens.issue(
            user,
            name=data["name"],
            scopes=data["scopes"],
            teams=data.get("teams") or (),
            days=data["expires_in_days"],
        )
    except ValidationFailed as exc:
        for name, problem in exc.extra.get("fields", {}).items():
            form.add_error(name if name in form.fields else None, problem)
        return _page(request, form)
    except LedgerError as exc:
        form.add_error(None, exc.detail)
        return _page(request, form)
    # Shown in this answer only (never stored by a browser: every signed-in answer is
    # `no-store`); reloading the list does not show it again.
    return _page(request, TokenForm(user=user), made)


@require_POST
@actor
def revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of the person's own tokens; another person's is a 404, as a missing one."""
    if not tokens.owns(request.user, token_id):
        raise Http404("No such token.")
    if tokens.revoke(request.user, token_id):
        messages.success(request, "Token revoked: it opens nothing from now on.")
    return redirect(reverse("api-tokens"))
