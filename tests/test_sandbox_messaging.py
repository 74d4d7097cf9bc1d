"""The sandbox messaging provider, spoken to over real HTTP in its own process: it honours no
key and offers no lookup, so every post is another message."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from tests.factories import get

if TYPE_CHECKING:
    from tests.fixtures.providers import SandboxProvider


def send(provider: SandboxProvider, **headers: str) -> httpx.Response:
    message = {"to": "ops@example.com", "subject": "Deploy", "body": "Done."}
    return provider.http.post("/messages", json=message, headers=headers)


def test_the_messaging_provider_sends_again_for_every_post_even_with_the_same_key(
    messaging_provider,
):
    first = send(messaging_provider, **{"Idempotency-Key": "key-1"})
    second = send(messaging_provider, **{"Idempotency-Key": "key-1"})

    assert (first.status_code, second.status_code) == (201, 201)
    assert first.json()["id"].startswith("msg_")
    assert first.json()["status"] == "sent"
    assert first.json()["id"] != second.json()["id"]
    assert "Idempotency-Key" not in first.headers
    stored = messaging_provider.transactions()
    assert [m["received_idempotency_key"] for m in stored] == ["key-1", "key-1"]


def test_the_messaging_provider_offers_no_lookup(messaging_provider):
    sent = send(messaging_provider).json()

    assert get(messaging_provider, f"/messages/{sent['id']}").status_code == 404
    assert get(messaging_provider, "/messages").status_code == 404


def test_a_dropped_message_was_still_sent(messaging_provider):
    with pytest.raises(httpx.TransportError):
        send(messaging_provider, **{"X-Sandbox-Fault": "drop"})

    assert len(messaging_provider.transactions()) == 1


def test_an_invalid_message_is_refused_with_400(messaging_provider):
    response = messaging_provider.http.post("/messages", json={"to": "", "body": "x"})

    assert response.status_code == 400
    assert messaging_provider.transactions() == []
