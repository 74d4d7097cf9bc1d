"""GET /health: liveness and readiness without a key."""

from __future__ import annotations

from django.test import Client


def test_health_reports_database_and_redis_without_a_key(db):
    response = Client().get("/api/v1/health")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "database": "ok",
        "redis": "ok",
        "restore_mode": False,
    }


def test_health_is_503_when_redis_cannot_be_reached(db, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    response = Client().get("/api/v1/health")
    assert response.status_code == 503
    body = response.json()
    assert (body["error"], body["redis"], body["database"]) == ("unavailable", "unreachable", "ok")
