"""The agent REST API (docs/api.md) as one django-ninja application: how it reads bodies and
writes answers, who may call (`auth.AgentKey`), and the error answer for each refusal. Its
routes are in `ledger.api.routes`, mounted here in the order the OpenAPI document lists them;
the callback door in providers' own schemes is mounted beside them by the URLconf."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import DatabaseError, InterfaceError, InternalError, OperationalError
from django.http import HttpRequest, HttpResponse
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.parser import Parser
from ninja.renderers import BaseRenderer

from ledger import jsonenc
from ledger.api.auth import AgentKey
from ledger.api.contract import LedgerAPI, check_media_type, check_object
from ledger.api.inputs import check_json
from ledger.api.middleware import unavailable
from ledger.api.routes import afterwards, effects, keyless
from ledger.errors import LedgerError
from ledger.policy.redaction import scrub_cards
from ledger.rules.limits import LimitExceeded

# Pinned: log pipelines filter on the name this module had before the ledger's subpackages.
log = logging.getLogger("ledger.api")


class ExactParser(Parser):
    """Bodies keep exact decimals; malformed JSON and unstorable strings are refused up front."""

    def parse_body(self, request: HttpRequest) -> Any:
        check_media_type(request)
        data = jsonenc.loads(request.body)
        check_object(data)
        check_json(data)
        return data


class ExactRenderer(BaseRenderer):
    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> str:
        return jsonenc.dumps(data)


api = LedgerAPI(
    title="Effect Ledger agent API",
    version="1",
    description=(
        "Record intent before dispatch; claim, report, recover. The reference, with every "
        "error code and an example of each call, is docs/api.md in the source repository "
        "(`make docs` builds it into the documentation site as api.html)."
    ),
    urls_namespace="api-v1",
    auth=AgentKey(),
    parser=ExactParser(),
    renderer=ExactRenderer(),
)


def error_response(
    request: HttpRequest, status: int, code: str, detail: str, **extra: Any
) -> HttpResponse:
    return api.create_response(request, {"error": code, "detail": detail, **extra}, status=status)


@api.exception_handler(LedgerError)
def _ledger_error(request: HttpRequest, exc: LedgerError) -> HttpResponse:
    response = api.create_response(request, exc.body(), status=exc.status)
    for header, value in exc.headers().items():
        response[header] = value
    return response


@api.exception_handler(LimitExceeded)
def _limit_exceeded(request: HttpRequest, exc: LimitExceeded) -> HttpResponse:
    # The transaction that refused may have rolled back with its alert (an intent posted with
    # its claim): enqueue it again, on its own; a no-op when it exists.
    exc.alert()
    return _ledger_error(request, exc)


@api.exception_handler(AuthenticationError)
def _unauthorized(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(
        request, 401, "unauthorized", "A valid agent key is required (Authorization: Bearer …)."
    )


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    cause = exc.__cause__
    if isinstance(cause, jsonenc.MalformedJSON):
        return error_response(
            request, 400, "malformed_json", f"The body is not valid JSON: {cause}"
        )
    if isinstance(cause, LedgerError):
        return _ledger_error(request, cause)
    code = {400: "malformed_json", 401: "unauthorized", 403: "forbidden", 404: "not_found"}
    return error_response(request, exc.status_code, code.get(exc.status_code, "error"), str(exc))


def _field_name(loc: list[Any]) -> str:
    # pydantic names union branches in the location ("constrained-str", "dict[str,any]").
    parts = [str(p) for p in loc if not re.search(r"[\[\]-]", str(p))]
    if parts and parts[0] == "body":
        # ("body", "payload", "run_id"): the second part names the view argument.
        parts = parts[2:]
    elif parts and parts[0] in ("query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "body"


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    fields: dict[str, str] = {}
    for error in exc.errors:
        # An unknown field is named as the body spelled it: cut, and card-free, like any echo.
        name = scrub_cards(_field_name(list(error.get("loc", [])))[:120])
        fields.setdefault(name, str(error.get("msg", "invalid")))
    return error_response(
        request, 422, "validation_error", "The request is not valid.", fields=fields
    )


@api.exception_handler(InternalError)
def _trigger_refusal(request: HttpRequest, exc: InternalError) -> HttpResponse:
    if "pgtrigger" not in str(exc):
        raise exc
    # The database backs up the transition table; reaching it means the Python side let a
    # forbidden write through. Refuse the request, and say loudly that this is a bug.
    log.error("BUG: the database refused a write the ledger attempted: %s", exc)
    return error_response(
        request, 409, "invalid_transition", "The database refused this state change."
    )


@api.exception_handler(OperationalError)
@api.exception_handler(InterfaceError)
def _unavailable(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
    return unavailable(exc)


# Mounted in the order the OpenAPI document lists them.
for routes in (effects, afterwards, keyless):
    api.add_router("", routes.router)
