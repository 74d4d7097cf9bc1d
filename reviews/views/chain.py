"""The audit chain page: the chain head, its last export, and a verification on request."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from ledger.audit import seal
from reviews.access.checks import reader


@require_GET
@reader
def chain(request: HttpRequest) -> HttpResponse:
    context = {"head": seal.chain_head(), "last_export": seal.last_export()}
    # A GET form: verifying changes nothing, and the result is a page one can link to.
    if request.GET.get("verify"):
        try:
            context["verdict"] = seal.verify_against_exports()
        except ValueError as exc:
            context["head_file_error"] = str(exc)
    return render(request, "audit/chain.html", context)
