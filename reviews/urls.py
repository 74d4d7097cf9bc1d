from django.urls import path

from reviews.remote import pages as remote
from reviews.remote.slack import door as slack
from reviews.views import (
    approvals,
    bulk,
    chain,
    effects,
    exports,
    halts,
    incidents,
    limits,
    notes,
    overview,
    queue,
    runs,
    statements,
    tokens,
)

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("queue/", queue.queue, name="queue"),
    path("queue/<int:item_id>/hold", queue.hold, name="review-hold"),
    # The hold's address before it had its own word, answered for one release (a page or a
    # bookmark from before the deploy still works).
    path("queue/<int:item_id>/claim", queue.hold, name="review-hold-old-path"),
    path("queue/<int:item_id>/assign", queue.assign, name="review-assign"),
    path("queue/<int:item_id>/notes", notes.add, name="review-note"),
    path("queue/<int:item_id>/release", notes.release, name="review-release"),
    path("queue/bulk", bulk.start, name="queue-bulk"),
    path("queue/bulk/<int:bulk_id>", bulk.progress, name="queue-bulk-progress"),
    path("queue/filters", bulk.save_filter, name="queue-filter-save"),
    path("queue/filters/<int:filter_id>/delete", bulk.delete_filter, name="queue-filter-delete"),
    path("effects/<uuid:effect_id>/", effects.detail, name="effect"),
    path("effects/<uuid:effect_id>/live", notes.live, name="effect-live"),
    path("runs/", runs.preview, name="run-preview"),
    path("limits/", limits.limits, name="limits"),
    path("approvals/", approvals.approvals, name="approvals"),
    path("effects/<uuid:effect_id>/decide/<str:action>", effects.decide, name="decide"),
    path("audit/exports/", exports.exports, name="exports"),
    path("audit/exports/<str:dataset>.<str:fmt>", exports.download, name="export"),
    path("audit/chain/", chain.chain, name="chain"),
    path("halts/", halts.halts, name="halts"),
    path("halts/add", halts.halt, name="halt"),
    path("halts/<int:halt_id>/resume", halts.resume, name="halt-resume"),
    path("statements/", statements.statements, name="statements"),
    path("statements/upload", statements.upload, name="statement-upload"),
    # A person's own operator tokens (reviews.operatorapi).
    path("tokens/", tokens.tokens_page, name="api-tokens"),
    path("tokens/<int:token_id>/revoke", tokens.revoke, name="api-token-revoke"),
    path("incidents/", incidents.incidents, name="incidents"),
    path(
        "incidents/<int:incident_id>/acknowledge",
        incidents.acknowledge,
        name="incident-acknowledge",
    ),
    # Deciding from where the operator is (reviews.remote, ADR 0020): Slack's interactivity
    # Request URL (signed by Slack, no session), the link a Slack user links their account
    # with, and an alert email's decision links (both behind the person's sign-in).
    path("slack/interactions", slack.interactions, name="slack-interactions"),
    path("slack/link/<str:token>", remote.slack_link, name="slack-link"),
    path("links/<str:token>", remote.follow, name="email-link"),
]
