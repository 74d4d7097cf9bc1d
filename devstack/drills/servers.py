"""The PostgreSQL and Redis a drill may stop and start: private ones under the drill's own
directory, never the machine's (other people's tests use those). They are the embedded servers
of `make run` (`devstack.embedded`), kept restartable at the same address."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from devstack.embedded import EmbeddedPostgres, EmbeddedRedis, _redis_executable


class RestartableRedis(EmbeddedRedis):
    """`EmbeddedRedis`, started again on the port it had: clients configured with its URL must
    find it there after the restart. It keeps nothing on disk, so a restart loses every queued
    job, as a real Redis restart without persistence does."""

    port = 0

    def start(self, attempts: int = 3) -> str:
        url = super().start(attempts)
        self.port = int(urlsplit(url).port or 0)
        return url

    def restart(self) -> None:
        if not self._try_start(_redis_executable(), self.port):
            raise RuntimeError(f"redis-server did not start again on port {self.port}")


class DrillServers:
    """One private PostgreSQL (a unix socket in `root`) and one private Redis (a free port)."""

    def __init__(self, root: Path) -> None:
        self.postgres = EmbeddedPostgres(root / "pg")
        self.redis = RestartableRedis(root / "redis")
        self.database_url = ""
        self.redis_url = ""

    def start(self) -> None:
        self.database_url = self.postgres.start()
        self.redis_url = self.redis.start()

    def stop_postgres(self) -> None:
        """`pg_ctl stop` in fast mode: open connections are cut, as in a real restart."""
        self.postgres.stop()

    def start_postgres(self) -> None:
        self.postgres.start()

    def stop_redis(self) -> None:
        self.redis.stop()

    def start_redis(self) -> None:
        self.redis.restart()

    def close(self) -> None:
        try:
            self.redis.stop()
        finally:
            self.postgres.stop()
