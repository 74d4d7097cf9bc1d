from django.urls import path

from reviews.views import chain, effects, exports, halts, incidents, overview, queue, statements

urlpatterns = [
    path("", overview.overview, name="overview"),
    path("queue/", queue.queue, name="queue"),
    path("queue/<int:item_id>/claim", queue.claim, name="review-claim"),
    path("queue/<int:item_id>/assign", queue.assign, name="review-assign"),
    path("effects/<uuid:effect_id>/", effects.detail, name="effect"),
    path("effects/<uuid:effect_id>/decide/<str:action>", effects.decide, name="decide"),
    path("audit/exports/", exports.exports, name="exports"),
    path("audit/exports/<str:dataset>.<str:fmt>", exports.download, name="export"),
    path("audit/chain/", chain.chain, name="chain"),
    path("halts/", halts.halts, name="halts"),
    path("halts/add", halts.add, name="halt-add"),
    path("halts/<int:halt_id>/resume", halts.lift, name="halt-resume"),
    path("statements/", statements.statements, name="statements"),
    path("statements/upload", statements.upload, name="statement-upload"),
    path("incidents/", incidents.incidents, name="incidents"),
    path(
        "incidents/<int:incident_id>/acknowledge",
        incidents.acknowledge,
        name="incident-acknowledge",
    ),
]
