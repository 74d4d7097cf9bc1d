"""What test modules import: the repository's root, the personas' password, the agent API
client, and small checks of the ledger's answers and rows. Fixtures are plugins under
tests/fixtures/ (conftest.py registers them); builders of rows and provider calls are in
tests/factories.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db import connection
from django.test import Client

from ledger.models import Agent, EffectEvent

ROOT = Path(__file__).resolve().parent.parent
# The pages' personas' password (tests/fixtures/people.py). Real: the browser tests type it.
PASSWORD = "correct horse battery staple"


class AgentClient:
    """Speaks the agent API as an outside client would: JSON over HTTP with a bearer key."""

    def __init__(self, agent: Agent, key: str) -> None:
        self.agent = agent
        self.key = key
        self.http = Client()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def post(self, path: str, body: Any = None, *, raw: str | bytes | None = None, **headers: str):
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        return self.http.post(
            f"/api/v1{path}",
            data=data,
            content_type="application/json",
            headers={**self._headers(), **headers},
        )

    def get(self, path: str, params: dict[str, Any] | None = None):
        return self.http.get(f"/api/v1{path}", params or {}, headers=self._headers())

    # The common steps of an effect's life, each asserting the documented status code.
    def intent(
        self, run_id: str = "run-1", step_id: str = "step-1", *, expect: int = 201, **body: Any
    ) -> dict:
        payload = {
            "run_id": run_id,
            "step_id": step_id,
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "10.00", "currency": "EUR"},
        }
        payload.update(body)
        response = self.post("/effects", payload)
        assert response.status_code == expect, response.content
        return response.json()

    def claim(self, effect_id: str, *, expect: int = 200, **body: Any) -> dict:
        body.setdefault("owner", "worker-1")
        response = self.post(f"/effects/{effect_id}/claim", body)
        assert response.status_code == expect, response.content
        return response.json()

    def outcome(
        self,
        effect_id: str,
        token: str,
        status: str = "confirmed",
        *,
        expect: int = 200,
        **body: Any,
    ) -> dict:
        response = self.post(
            f"/effects/{effect_id}/outcome", {"lease_token": token, "status": status, **body}
        )
        assert response.status_code == expect, response.content
        return response.json()


def assert_error(response, status: int, code: str) -> dict[str, Any]:
    """A documented error: the status, JSON, the code, and a sentence saying what is wrong."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert body["error"] == code
    assert isinstance(body["detail"], str) and body["detail"]
    return body


def expire_lease(effect_id: str) -> None:
    """Back-date a lease so that it ran out a second ago by the database clock."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE ledger_effect SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
            [effect_id],
        )


def events_of(effect_id: str) -> list[EffectEvent]:
    return list(EffectEvent.objects.filter(effect_id=effect_id).order_by("id"))
