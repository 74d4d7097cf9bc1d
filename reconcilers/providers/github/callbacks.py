"""GitHub's webhook deliveries at `POST /api/v1/callbacks/github`.

GitHub signs a delivery's body with the webhook's secret, `X-Hub-Signature-256: sha256=<hex
HMAC-SHA256>`, and nothing else: no timestamp is signed, so the age of a delivery cannot be
checked and a replay is refused only by the ledger's record of what it already took. Each
delivery carries its identity in `X-GitHub-Delivery` (required here), but that header is not
signed: a body captured once could be presented again under a made-up delivery id. The
identity recorded is therefore the SHA-256 of the signed body itself, which the same delivery,
under its own id or any other, presents again. (GitHub keeps the id when a person redelivers;
the body is the same too, and was already taken.)

Several secrets are tried, the newest first, while one rotates (LEDGER_WEBHOOK_SECRETS and
LEDGER_WEBHOOK_OLD_SECRETS). An `issues` event whose action is `opened`, for an issue whose
body carries one effect's marker, settles that effect confirmed, with the issue's `node_id` as
the provider's reference; every other event (a `ping`, comments, edits, pull requests) says
nothing the ledger acts on and is answered 200.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re

from reconcilers.providers.callbacks import CallbackRefused, CallbackRequest, Settlement
from reconcilers.providers.github import marker

_SIGNATURE = re.compile(r"sha256=([0-9a-f]{64})")
_DELIVERY = re.compile(r"[A-Za-z0-9-]{1,100}")


class GitHubWebhooks:
    name = "github"

    def verify(self, request: CallbackRequest) -> str:
        given = _SIGNATURE.fullmatch(request.headers.get("x-hub-signature-256", "").strip())
        if given is None:
            raise CallbackRefused("Missing or malformed X-Hub-Signature-256 header.")
        if not _DELIVERY.fullmatch(request.headers.get("x-github-delivery", "")):
            raise CallbackRefused("Missing or malformed X-GitHub-Delivery header.")
        for secret in request.secrets:
            expected = hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
            if hmac.compare_digest(expected, given.group(1)):
                return "body-sha256:" + hashlib.sha256(request.body).hexdigest()
        raise CallbackRefused("The X-Hub-Signature-256 signature does not match.")

    def settlements(self, body: bytes) -> list[Settlement]:
        try:
            event = json.loads(body)
        except (ValueError, RecursionError):
            raise ValueError("the body is not JSON") from None
        if not isinstance(event, dict):
            raise ValueError("the body is not a JSON object")
        issue = event.get("issue")
        # Only `issues` events have an "opened" action with an issue (a pull request's event
        # carries `pull_request` instead, a comment's action is never "opened").
        if event.get("action") != "opened" or not isinstance(issue, dict):
            return []
        if issue.get("pull_request"):
            return []
        keys = {tag.key for tag in marker.markers(issue.get("body"))}
        if len(keys) != 1:
            # None: not ours. Several: a body a person pasted markers into; the lookup, which
            # counts every issue per key, will say what happened.
            return []
        node_id, number = issue.get("node_id"), issue.get("number")
        if not isinstance(node_id, str) or not node_id or not isinstance(number, int):
            raise ValueError("the opened issue has no node_id or number")
        repository = event.get("repository")
        full_name = repository.get("full_name") if isinstance(repository, dict) else None
        response = {
            "number": number,
            "node_id": node_id,
            "html_url": issue.get("html_url"),
            "repository": full_name,
            "title": issue.get("title"),
        }
        return [Settlement(keys.pop(), "confirmed", provider_ref=node_id, response=response)]
