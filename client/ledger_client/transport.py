"""JSON over HTTP to the ledger, retried where a repeat is safe.

Every ledger call this client makes is idempotent by construction: an intent is keyed by its
effect key, a claim carries a `claim_id` (a repeat returns the same lease token), a heartbeat
only extends, and a repeated outcome with the same token, status, ref and response changes
nothing. So a transport error or a 503 is retried with the same body, with backoff.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import httpx

from ledger_client.errors import LedgerRequestError, LedgerUnavailable

log = logging.getLogger("ledger_client")

BACKOFF_BASE = 0.2
BACKOFF_CAP = 3.0


class Transport:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float,
        retries: int,
        http: httpx.Client | None = None,
    ) -> None:
        self.retries = retries
        # httpx clients are thread-safe: the heartbeat threads share this one.
        self.http = http or httpx.Client(
            base_url=base_url.rstrip("/") + "/api/v1",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
        )

    def close(self) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """(status, JSON body) of the first answer that is not a 503; raises
        `LedgerRequestError` for any other 4xx/5xx and `LedgerUnavailable` when retries run out.
        `timeout` replaces the client's for this call (a long poll waits longer)."""
        last: str = ""
        for attempt in range(self.retries + 1):
            if attempt:
                delay = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
                time.sleep(delay * random.uniform(0.5, 1.0))
            try:
                response = self.http.request(
                    method,
                    path,
                    json=body,
                    params=params,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                log.warning("ledger %s %s failed (%s); retrying", method, path, last)
                continue
            if response.status_code == 503:
                last = "503 unavailable"
                log.warning("ledger %s %s answered 503; retrying", method, path)
                continue
            data = _json(response)
            if response.status_code >= 400:
                raise LedgerRequestError(
                    response.status_code,
                    str(data.get("error", "error")),
                    str(data.get("detail", response.reason_phrase)),
                    data,
                )
            return response.status_code, data
        raise LedgerUnavailable(
            f"The ledger did not answer {method} {path} after {self.retries + 1} tries ({last})."
        )


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {"detail": response.text[:500]}
    return data if isinstance(data, dict) else {"data": data}
