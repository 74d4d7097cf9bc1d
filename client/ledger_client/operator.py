"""`Operator`: a person's connection to the operator API, with their personal token (made on the
ledger's API tokens page, `elop_…`). It reads the review queue and one item with the decisions
offered, and takes decisions under exactly the pages' rules (four-eyes, teams, a reason, the
evidence each kind asks for):

    op = Operator("https://ledger.example.com", token)
    for row in op.iter_queue(reason="reconciliation_inconclusive"):
        item = op.item(row.effect_id)
        if item.suggested is not None:
            op.decide(row.effect_id, **item.suggested.ask)

Each refusal is its own exception, all `OperatorError`s (and `LedgerClientError`s): the token
(`TokenRefused`, 401), what the token or its person may not do (`OperatorForbidden`, 403: its
`code` is `insufficient_scope`, `not_an_operator` or `outside_teams`), no such effect
(`ItemNotFound`), a decision refused by the rules (`DecisionRefused`, 409, with the reason code:
`four_eyes`, `already_decided`, `invalid_transition`, …), an incomplete decision
(`DecisionInvalid`, 422, `fields`). `LedgerUnavailable` when the ledger did not answer.

Reads are retried on transport failures and 502/503/504; a decision only when the request
never reached the ledger (a repeat after it arrived is refused as `already_decided` anyway).
Each model mirrors a schema of `/api/v1/openapi.json` (`tests/test_client_models.py`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import Any, Literal

import httpx

from ledger_client import protocol
from ledger_client.errors import LedgerClientError
from ledger_client.models import Model, Status
from ledger_client.protocol import Call, Retry

PREFIX = "/operator"


# --- Answers ------------------------------------------------------------------------------


class QueueRow(Model):
    """One open review item, as the queue lists it."""

    item: int
    effect_id: str
    effect_key: str
    reason: str
    severity: str
    opened_at: datetime
    due_at: datetime
    tool: str
    agent: str
    target: str
    status: Status
    version: int
    amount: str | None
    currency: str | None
    assignee: str | None
    suggested: str | None
    suggested_label: str | None


class QueuePage(Model):
    items: list[QueueRow]
    next_cursor: str | None


class EffectSummary(Model):
    id: str
    effect_key: str
    kind: Literal["action", "compensation", "decision"]
    tool: str
    target: str
    agent: str
    run_id: str
    status: Status
    # Send it back as `expected_version`: a decision on an effect that moved is refused.
    version: int
    attempt: int
    max_attempts: int
    provider_ref: str
    amount: str | None
    currency: str | None
    requested_by: Literal["agent", "operator"]
    created_at: datetime
    updated_at: datetime


class OpenItem(Model):
    id: int
    reason: str
    severity: str
    opened_at: datetime
    due_at: datetime
    assignee: str | None
    held_by: str | None


class PreviewLine(Model):
    text: str
    money: str
    when: datetime | None


class Preview(Model):
    """What a decision will lead to: the effect's next status, who acts next."""

    status: str
    actor: Literal["ledger", "agent", "person", "nobody"]
    lines: list[PreviewLine]
    money_moves: bool


class Offered(Model):
    """A decision offered to the token's person now, with the fields it reads."""

    action: str
    label: str
    dangerous: bool
    fields: list[str]
    required: list[str]
    question: str
    preview: Preview


class Suggested(Model):
    """The decision the evidence suggests; `ask` is ready for `Operator.decide(**ask)`."""

    action: str
    label: str
    ask: dict[str, Any]


class FourEyes(Model):
    waits: bool
    asked_by: str
    # You asked for what waits: another operator decides it.
    yours: bool


class OperatorItem(Model):
    effect: EffectSummary
    item: OpenItem | None
    actions: list[Offered]
    suggested: Suggested | None
    four_eyes: FourEyes

    def offers(self, action: str) -> bool:
        return any(offered.action == action for offered in self.actions)


class DecisionResult(Model):
    decision_id: str
    # As recorded: `propose_retry` for a retry that waits for a second operator.
    action: str
    channel: Literal["api"]
    effect_id: str
    status: Status
    version: int
    follow_up: str | None


# --- Refusals ------------------------------------------------------------------------------


class OperatorError(LedgerClientError):
    """The ledger refused an operator API call: `status`, `code` (the JSON error's `error`),
    `detail` (a sentence), and the whole answer as `body`."""

    def __init__(self, status: int, body: Mapping[str, Any]) -> None:
        self.status = status
        self.body = dict(body)
        self.code = str(body.get("error", "error"))
        self.detail = str(body.get("detail", ""))
        super().__init__(f"{status} {self.code}: {self.detail}")

    @property
    def fields(self) -> dict[str, str]:
        return dict(self.body.get("fields") or {})


class TokenRefused(OperatorError):
    """401: no token, or one that is malformed, unknown, expired or revoked."""


class OperatorForbidden(OperatorError):
    """403: the token's scope does not cover the call (`insufficient_scope`), its person is
    deactivated or no longer an operator (`not_an_operator`), or the effect is of a team the
    token or its person does not reach (`outside_teams`)."""


class ItemNotFound(OperatorError):
    """404: no such effect, or one of a team you do not see."""


class DecisionRefused(OperatorError):
    """409: the pages' rules refuse the decision; `code` says which (`four_eyes`,
    `already_decided` with `decided_by`, `invalid_transition`, `retry_unsafe`, …)."""


class DecisionInvalid(OperatorError):
    """422: the decision lacks what its kind needs, or a field is unknown; `fields` names
    them."""


_BY_STATUS: dict[int, type[OperatorError]] = {
    401: TokenRefused,
    403: OperatorForbidden,
    404: ItemNotFound,
    409: DecisionRefused,
    422: DecisionInvalid,
}


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"error": "error", "detail": response.text[:500]}


# --- The client ----------------------------------------------------------------------------


class Operator:
    """One person's connection to the operator API (`token`: their `elop_…` token)."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        http: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = Retry(retries=retries)
        self.sleep = sleep
        self.http = http or httpx.Client(
            base_url=base_url.rstrip("/") + protocol.API_PREFIX,
            headers={"Authorization": f"Bearer {token}", "User-Agent": protocol.USER_AGENT},
            timeout=timeout,
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Operator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def queue(
        self,
        *,
        limit: int = 50,
        cursor: str | None = None,
        reason: str | None = None,
        tool: str | None = None,
    ) -> QueuePage:
        """One page of the open review items of your teams, oldest first."""
        params = {"limit": limit, "cursor": cursor, "reason": reason, "tool": tool}
        shown = {name: value for name, value in params.items() if value is not None}
        return QueuePage.model_validate(self._send(Call("GET", f"{PREFIX}/queue", params=shown)))

    def iter_queue(
        self, *, reason: str | None = None, tool: str | None = None
    ) -> Iterator[QueueRow]:
        """Every open item, page after page."""
        cursor = None
        while True:
            page = self.queue(limit=200, cursor=cursor, reason=reason, tool=tool)
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def item(self, effect_id: str) -> OperatorItem:
        """One effect: its open item, the decisions offered to you, the suggested one."""
        answer = self._send(Call("GET", f"{PREFIX}/effects/{effect_id}"))
        return OperatorItem.model_validate(answer)

    def decide(
        self,
        effect_id: str,
        action: str,
        *,
        reason: str,
        expected_version: int,
        provider_ref: str = "",
        evidence: str = "",
        verified_absent: bool = False,
        compensation_tool: str = "",
        compensation_request: Mapping[str, Any] | None = None,
        force: bool = False,
        over_hold: bool = False,
    ) -> DecisionResult:
        """Take a decision on the effect you read at `expected_version`. Raises
        `DecisionRefused` (with the rule's code), `DecisionInvalid`, `OperatorForbidden`."""
        body = {
            "action": action,
            "reason": reason,
            "expected_version": expected_version,
            "provider_ref": provider_ref,
            "evidence": evidence,
            "verified_absent": verified_absent,
            "compensation_tool": compensation_tool,
            "compensation_request": dict(compensation_request or {}),
            "force": force,
            "over_hold": over_hold,
        }
        path = f"{PREFIX}/effects/{effect_id}/decisions"
        # Not repeated once it may have arrived: a decision has no repeat key of its own.
        answer = self._send(Call("POST", path, body=body, idempotent=False))
        return DecisionResult.model_validate(answer)

    def _send(self, call: Call) -> Any:
        attempt = 0
        while True:
            attempt += 1
            failure: protocol.Failure
            try:
                response = self.http.request(
                    call.method, call.path, json=call.body, params=call.params
                )
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                failure, last = "connect", f"{type(exc).__name__}: {exc}"
            except httpx.TransportError as exc:
                failure, last = "transport", f"{type(exc).__name__}: {exc}"
            else:
                kind = protocol.failure_of(response.status_code)
                if kind is None:
                    return self._answer(response)
                failure, last = kind, f"{response.status_code} {response.text[:200]}"
            if not self.retry.should_retry(call, failure, attempt):
                raise protocol.unavailable(call, attempt, last)
            self.sleep(self.retry.delay(attempt))

    @staticmethod
    def _answer(response: httpx.Response) -> Any:
        body = _body(response)
        if response.status_code < 400:
            return body
        cls = _BY_STATUS.get(response.status_code, OperatorError)
        raise cls(response.status_code, body if isinstance(body, dict) else {"detail": body})
