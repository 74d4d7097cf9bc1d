"""Shared fixtures: real PostgreSQL and Redis (from DATABASE_URL / REDIS_URL), named personas."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import django_rq
import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.utils import timezone

from ledger.api import longpoll
from ledger.effects import digests
from ledger.models import Agent, Effect, EffectEvent, Tool
from ledger.observability.metrics import summary
from ledger.policy.agentkeys import issue_key
from ledger.policy.roles import AUDITOR, OPERATOR, grant
from ledger.policy.toolfile import load

ROOT = Path(__file__).resolve().parent.parent
# A Redis database of its own, so that tests neither drain nor flush anyone else's jobs.
TEST_REDIS_DB = 13
# Sandbox providers as real subprocesses: payments_provider, messaging_provider, start_sandbox.
# tests.logscan: every log line of the suite is scanned for keys, passwords and card numbers.
pytest_plugins = ["tests.sandbox", "tests.logscan"]


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


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, then: the long-poll listener (ledger.api.longpoll) holds a connection to the
    test database, and must let go of it before the database is dropped."""
    yield
    longpoll.stop()


@pytest.fixture(autouse=True)
def fresh_summary() -> Iterator[None]:
    """Each test reads the summary behind /metrics and the overview afresh, in its own
    transaction: a summary kept from an earlier test would count that test's rows, and a
    refreshing thread left running by one would read outside this test's transaction."""
    summary.stop()
    summary.expire()
    yield
    summary.stop()
    summary.expire()


@pytest.fixture
def tools(db) -> dict[str, Tool]:
    load(ROOT / "tools.toml")
    return {t.name: t for t in Tool.objects.all()}


@pytest.fixture
def provider(payments_provider, tools):
    """The payments sandbox, with charge_card's lookups pointed at it."""
    tool = tools["charge_card"]
    tool.reconciler_config = {"base_url": payments_provider.url}
    tool.save()
    return payments_provider


def _persona(name: str) -> AgentClient:
    agent = Agent.objects.create(name=name)
    return AgentClient(agent, issue_key(agent))


@pytest.fixture
def alice(db, tools) -> AgentClient:
    """The agent whose effects most tests follow."""
    return _persona("alice")


@pytest.fixture
def bob(db, tools) -> AgentClient:
    """A second agent: must never see or change alice's effects."""
    return _persona("bob")


@pytest.fixture
def make_agent(db, tools) -> Callable[[str], AgentClient]:
    return _persona


@pytest.fixture
def make_effect(alice) -> Callable[..., Effect]:
    """Insert an effect in any state directly (an INSERT is not a transition), for tests that
    start from a given state."""
    counter = iter(range(1, 1_000_000))

    def make(status: str = "planned", **fields: Any) -> Effect:
        n = next(counter)
        values: dict[str, Any] = {
            "agent": alice.agent,
            "effect_key": f"fixture:{n}",
            "run_id": "fixture",
            "step_id": str(n),
            "seq": n,
            "tool": "charge_card",
            "target": "acct_42",
            "request": {"amount": "1.00"},
            "request_hash": digests.request_hash("charge_card", "acct_42", {"amount": "1.00"}),
            "idempotency_key": digests.idempotency_key(alice.agent.id, f"fixture:{n}"),
            "status": status,
            "max_attempts": 3,
        }
        if status == "dispatching":
            values.update(
                attempt=1,
                lease_token=f"token-{n}",
                lease_owner="worker-1",
                lease_seconds=60,
                lease_expires_at=timezone.now() + timedelta(minutes=1),
            )
        if fields.get("kind") == "compensation":
            # An agent's compensation must name a confirmed parent of its own and the parent's
            # declared tool (PostgreSQL refuses any other): the ones made here stand for what
            # an operator decided. Agents' own go through the API in their tests.
            values["requested_by"] = "operator"
        values.update(fields)
        return Effect.objects.create(**values)

    return make


@pytest.fixture
def rq_queue(settings):
    """The default rq queue, on a Redis database of its own, empty before and after."""
    configured = settings.RQ_QUEUES["default"]
    url = urlsplit(configured["URL"])._replace(path=f"/{TEST_REDIS_DB}")
    settings.RQ_QUEUES = {"default": {**configured, "URL": urlunsplit(url)}}
    queue = django_rq.get_queue("default")
    queue.empty()
    yield queue
    queue.empty()
    queue.connection.close()


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


# People: the pages' personas. Passwords are real (the browser tests type them).
PASSWORD = "correct horse battery staple"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """A deliberately slow hash protects stored passwords, not test personas."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _person(username: str, role: str | None) -> User:
    user = User.objects.create_user(username, password=PASSWORD)
    if role:
        grant(user, role)
    return user


@pytest.fixture
def olga(db) -> User:
    """An operator: reads, decides, claims."""
    return _person("olga", OPERATOR)


@pytest.fixture
def otto(db) -> User:
    """A second operator, for races with olga."""
    return _person("otto", OPERATOR)


@pytest.fixture
def audrey(db) -> User:
    """An auditor: reads and exports, never acts."""
    return _person("audrey", AUDITOR)


@pytest.fixture
def nemo(db) -> User:
    """Signed in, but with no role at all."""
    return _person("nemo", None)
