"""The fake GitHub's webhook: an `issues` delivery for every issue opened, signed as GitHub signs
them (`X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, and the legacy SHA-1
`X-Hub-Signature`), each with its `X-GitHub-Delivery` id and `X-GitHub-Event`.

Like GitHub, it tries each delivery once and does not retry a failure (a person redelivers);
every attempt, with its headers and body, is kept for the tests (`GET /_sandbox/deliveries`).
The signature is written out here, not imported from the ledger: the outside world shares no
code with the service it calls.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import urllib.error
import urllib.request
import uuid
from typing import Any

TIMEOUT = 10


def signed_headers(secret: str, body: bytes, event: str, delivery: str) -> dict[str, str]:
    """The headers of one delivery of `body`."""
    sha256 = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    sha1 = hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/fake",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "1",
        "X-Hub-Signature": f"sha1={sha1}",
        "X-Hub-Signature-256": f"sha256={sha256}",
    }


class Hooks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._url: str | None = None
        self._secret: str | None = None
        self._sent: list[dict[str, Any]] = []

    def configure(self, url: Any, secret: Any) -> None:
        with self._lock:
            usable = isinstance(url, str) and isinstance(secret, str) and bool(secret)
            self._url, self._secret = (url, secret) if usable else (None, None)
            if not usable:
                self._sent = []

    def deliveries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(d) for d in self._sent]

    def opened(self, issue: dict[str, Any], repository: dict[str, Any]) -> None:
        """Announce an opened issue, in a thread of its own (the API answer does not wait)."""
        with self._lock:
            url, secret = self._url, self._secret
        if url is None or secret is None:
            return
        payload = {
            "action": "opened",
            "issue": issue,
            "repository": repository,
            "sender": issue["user"],
        }
        body = json.dumps(payload).encode()
        headers = signed_headers(secret, body, "issues", str(uuid.uuid4()))
        threading.Thread(target=self._send, args=(url, body, headers), daemon=True).start()

    def _send(self, url: str, body: bytes, headers: dict[str, str]) -> None:
        record: dict[str, Any] = {
            "url": url,
            "headers": headers,
            "body": body.decode(),
            "status": None,
            "error": "",
        }
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                record["status"] = answer.status
        except urllib.error.HTTPError as exc:
            record["status"] = exc.code
        except OSError as exc:
            record["error"] = type(exc).__name__
        with self._lock:
            self._sent.append(record)
