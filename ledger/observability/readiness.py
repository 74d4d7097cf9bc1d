"""Can the service reach what it needs? Used by /health."""

from __future__ import annotations

import redis
from django.conf import settings
from django.db import DatabaseError, connection


def database_ok() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except DatabaseError:
        return False


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=settings.REDIS_SOCKET_TIMEOUT,
        socket_connect_timeout=settings.REDIS_SOCKET_TIMEOUT,
    )


def redis_ok() -> bool:
    try:
        return bool(redis_client().ping())
    except (redis.RedisError, OSError):
        return False
