"""Every operator page, for the browser tests that visit them all (test_every_page.py, at the
desk; test_phone.py, at 390 px): a ledger with an effect in each status and kind, review items
for each kind of reason, a halt, a limit refusal, and what waits for approval."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from playwright.sync_api import Page, Request, Response

from ledger.containment.halts import halt, resume
from ledger.models import Alert, AlertKind, Effect, Reason, Tool
from ledger.models.states import Kind, Status
from ledger.rules.reviewqueue import open_review

# An item opened for each of these reasons, on an effect in a status it is opened for.
REVIEWED = [
    ("unknown", Reason.INCONCLUSIVE),
    ("unknown", Reason.ATTEMPTS_EXHAUSTED),
    ("unknown", Reason.NO_LOOKUP),
    ("confirmed", Reason.DUPLICATE),
    ("confirmed", Reason.MISMATCH),
    ("awaiting_confirmation", Reason.STALE),
    ("awaiting_approval", Reason.APPROVAL_REQUIRED),
]
PRICED = {"amount": "12.50", "currency": "EUR"}


def ledger_with_everything(make_effect: Callable[..., Effect], alice) -> list[str]:
    """Fill the ledger and return the path of every page to visit."""
    Tool.objects.filter(name="charge_card").update(
        amount_path="amount",
        currency_path="currency",
        limit_claims_per_minute=100,
        limit_amount_per_day={"EUR": "5000.00"},
        approve_above=Decimal("1000.00"),
    )
    effects = [make_effect(status, request=PRICED) for status in Status.values]
    for status, reason in REVIEWED:
        effect = make_effect(status, attempt=1, request=PRICED)
        open_review(effect.id, reason)
        effects.append(effect)
    target = effects[-1]
    effects.append(
        make_effect("planned", kind=Kind.COMPENSATION, tool="refund_card", parent=target)
    )
    # A halt and its resuming are decisions with pages of their own.
    resumed = halt("tool", "send_email", reason="bounce storm", by="olga")
    resume(resumed.halt.pk, reason="relay fixed", by="olga")
    halt("tool", "create_ticket", reason="ticket flood", by="olga")
    effects.extend(Effect.objects.filter(kind=Kind.DECISION))
    Alert.objects.create(
        kind=AlertKind.LIMIT_EXCEEDED,
        key="tool:charge_card:claims_per_minute:2026-01-01T00:00Z",
        payload={
            "error": "limit_exceeded",
            "detail": "Limit tool:charge_card:claims_per_minute reached: 100 of 100.",
            "limit": {"which": "tool:charge_card:claims_per_minute", "current": 100, "max": 100},
        },
    )
    return [
        "/",
        "/?mode=live",
        "/queue/",
        "/queue/?status=unknown&severity=high",
        "/queue/?reason=duplicate&sort=due&age=lt1d&assignee=none",
        "/queue/?page=2",
        *(f"/effects/{effect.id}/" for effect in effects),
        f"/effects/{effects[-len(REVIEWED)].id}/?decide=confirm",
        "/audit/exports/",
        "/audit/chain/",
        "/halts/",
        "/statements/",
        "/incidents/",
        "/limits/",
        "/approvals/",
        f"/runs/?run=fixture&agent={alice.agent.name}",
    ]


@dataclass
class Visits:
    """What a page's loading asked for and got: every 4xx/5xx answer, failed request and console
    error, with the page it happened on."""

    page: Page
    problems: list[str] = field(default_factory=list)
    at: str = ""

    def __post_init__(self) -> None:
        self.page.on("response", self._response)
        self.page.on("requestfailed", self._failed)
        self.page.on(
            "console",
            lambda m: m.type == "error" and self.problems.append(f"{self.at}: console {m.text}"),
        )

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.problems.append(f"{self.at}: {response.status} {response.url}")

    def _failed(self, request: Request) -> None:
        # Leaving a page cancels its polls in flight: that is not a failure of the page.
        if request.failure != "net::ERR_ABORTED":
            self.problems.append(f"{self.at}: failed {request.url} ({request.failure})")

    def visit(self, path: str) -> None:
        self.at = path
        response = self.page.goto(path)
        assert response is not None and response.status == 200, f"{path}: {response}"
        # Whatever the page loads after its first paint (htmx partials, the favicon).
        self.page.wait_for_load_state("networkidle")
