"""The pages a link from outside opens, each behind the person's sign-in: an alert email's
decision link (`follow`), and the link a Slack user is given to link their account
(`slack_link`). A link is used up only once the person signed in and may use it: a refusal
before that (no role, another team's effect, a decision no longer offered) leaves it unused.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from reviews.access.checks import can_act
from reviews.access.teams import effect_or_404
from reviews.decisions.kinds import KINDS
from reviews.decisions.offer import allowed_actions
from reviews.remote import emaillinks, signed
from reviews.remote.offers import decided_elsewhere
from reviews.remote.signed import LinkRefused
from reviews.remote.slack import people

TEMPLATE = "reviews/remote/link.html"


def _refused(request: HttpRequest, refusal: LinkRefused, effect_id: str = "") -> HttpResponse:
    context = {"title": refusal.title, "detail": refusal.detail, "effect_id": effect_id}
    return render(request, TEMPLATE, context, status=refusal.status)


@require_GET
@login_required
def follow(request: HttpRequest, token: str) -> HttpResponse:
    """An alert email's link: after sign-in, the effect page with the decision's form open."""
    try:
        data = signed.read(token, salt=emaillinks.SALT, max_age=settings.LEDGER_EMAIL_LINK_MAX_AGE)
        target = emaillinks.target_of(data)
    except LinkRefused as refusal:
        return _refused(request, refusal)
    if not can_act(request.user):
        raise PermissionDenied("Your role does not allow deciding.")
    # Another team's effect: 404, as one that does not exist (ADR 0014).
    effect = effect_or_404(request.user, target.effect_id)
    shown = str(effect.pk)
    done = decided_elsewhere(target.item_id)
    if done is not None:
        by = done.resolved_by.get_username() if done.resolved_by else "the ledger"
        said = f"{by} decided it at {done.resolved_at:%Y-%m-%d %H:%M} UTC: {done.resolution}"
        return _refused(request, LinkRefused(409, "Already decided", said), shown)
    if target.action not in allowed_actions(effect, request.user):
        label = KINDS[target.action].label if target.action in KINDS else target.action
        said = f"“{label}” is not offered to you on this effect as it is now."
        return _refused(request, LinkRefused(409, "No longer offered", said), shown)
    try:
        signed.use(target.nonce, emaillinks.PURPOSE, request.user)
    except LinkRefused as refusal:
        return _refused(request, refusal, shown)
    emaillinks.opened(request.session, effect.pk, target.action)
    url = reverse("effect", kwargs={"effect_id": effect.pk})
    return redirect(f"{url}?decide={target.action}#decide-{target.action}")


@require_http_methods(["GET", "POST"])
@login_required
def slack_link(request: HttpRequest, token: str) -> HttpResponse:
    """The link a Slack user was shown: GET asks the signed-in person to confirm, POST links
    the Slack user to their account and uses the link up."""
    try:
        data = signed.read(token, salt=people.LINK_SALT, max_age=settings.LEDGER_SLACK_LINK_MAX_AGE)
    except LinkRefused as refusal:
        return _refused(request, refusal)
    team_id, slack_user = str(data.get("t") or ""), str(data.get("u") or "")
    context = {"team_id": team_id, "slack_user": slack_user}
    if request.method == "GET":
        return render(request, "reviews/remote/slack_link.html", context)
    try:
        # One transaction: a link refused (another account's) leaves the link unused.
        with transaction.atomic():
            signed.use(data["n"], "slack", request.user)
            made = people.link(team_id, slack_user, request.user, by="self")
    except LinkRefused as refusal:
        return _refused(request, refusal)
    except people.AlreadyLinked as exc:
        said = f"{exc} An admin unlinks it first (manage.py linkslack --unlink)."
        return _refused(request, LinkRefused(409, "Linked to another account", said))
    context["linked"] = "Linked." if made else "It was linked to your account already."
    return render(request, "reviews/remote/slack_link.html", context)
