"""What the fake GitHub answers with, in the shapes of GitHub's REST API description (the
`issue`, `simple-user` and `repository` objects of its documented examples) and its error
bodies (`{"message", "documentation_url", "status"}`).

Standard library only, like every sandbox provider: the outside world shares no code with the
service it is called by.
"""

from __future__ import annotations

import base64
import json
import time
import zlib
from typing import Any

from devstack.sandbox.service import HttpError, Reply

DOCS = "https://docs.github.com/rest"
SECONDARY_LIMIT_DOCS = (
    "https://docs.github.com/rest/using-the-rest-api/rate-limits-for-the-rest-api"
    "#about-secondary-rate-limits"
)
WEB = "https://github.com"
OWNER_ID = 583231


class GitHubError(HttpError):
    """An error answer as GitHub writes it."""

    def __init__(
        self, status: int, message: str, errors: list[dict[str, str]] | None = None, **headers: str
    ) -> None:
        super().__init__(status, "github", message)
        self.errors = errors
        self.headers = headers
        self.documentation = DOCS

    def reply(self) -> Reply:
        payload: dict[str, Any] = {"message": self.message, "documentation_url": self.documentation}
        if self.errors:
            payload["errors"] = self.errors
        payload["status"] = str(self.status)
        return Reply(self.status, payload, headers=dict(self.headers))


def iso(moment: float) -> str:
    """GitHub's timestamps: ISO 8601 in UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(moment))


def user(login: str, api: str) -> dict[str, Any]:
    """A `simple-user` object."""
    node = base64.b64encode(f"04:User{OWNER_ID}".encode()).decode()
    base = f"{api}/users/{login}"
    return {
        "login": login,
        "id": OWNER_ID,
        "node_id": node,
        "avatar_url": f"https://avatars.githubusercontent.com/u/{OWNER_ID}?v=4",
        "gravatar_id": "",
        "url": base,
        "html_url": f"{WEB}/{login}",
        "followers_url": f"{base}/followers",
        "following_url": f"{base}/following{{/other_user}}",
        "gists_url": f"{base}/gists{{/gist_id}}",
        "starred_url": f"{base}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{base}/subscriptions",
        "organizations_url": f"{base}/orgs",
        "repos_url": f"{base}/repos",
        "events_url": f"{base}/events{{/privacy}}",
        "received_events_url": f"{base}/received_events",
        "type": "User",
        "site_admin": False,
    }


def node_id(prefix: str, repo_id: int, number: int) -> str:
    raw = f"{repo_id}:{number}".encode()
    return prefix + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def repository(row: dict[str, Any], api: str) -> dict[str, Any]:
    """A `repository` object, as a webhook payload carries it (the fields read here)."""
    owner, name = row["full_name"].split("/", 1)
    return {
        "id": row["id"],
        "node_id": node_id("R_kgDO", row["id"], 0),
        "name": name,
        "full_name": row["full_name"],
        "private": True,
        "owner": user(owner, api),
        "html_url": f"{WEB}/{row['full_name']}",
        "url": f"{api}/repos/{row['full_name']}",
        "issues_url": f"{api}/repos/{row['full_name']}/issues{{/number}}",
        "created_at": iso(row["created"]),
        "updated_at": iso(row["created"]),
        "default_branch": "main",
    }


def issue(row: dict[str, Any], api: str) -> dict[str, Any]:
    """An `issue` object (a pull request listed among issues carries `pull_request`)."""
    full_name, number = row["repo"], row["number"]
    base = f"{api}/repos/{full_name}/issues/{number}"
    kind = "pull" if row["is_pull"] else "issues"
    shaped: dict[str, Any] = {
        "id": row["id"],
        "node_id": row["node_id"],
        "url": base,
        "repository_url": f"{api}/repos/{full_name}",
        "labels_url": f"{base}/labels{{/name}}",
        "comments_url": f"{base}/comments",
        "events_url": f"{base}/events",
        "html_url": f"{WEB}/{full_name}/{kind}/{number}",
        "number": number,
        "state": row["state"],
        "state_reason": "completed" if row["state"] == "closed" else None,
        "title": row["title"],
        "body": row["body"],
        "user": user(row["author"], api),
        "labels": [_label(name, api, full_name) for name in json.loads(row["labels"])],
        "assignee": None,
        "assignees": [],
        "milestone": None,
        "locked": False,
        "active_lock_reason": None,
        "comments": 0,
        "closed_at": iso(row["closed"]) if row["closed"] else None,
        "created_at": iso(row["created"]),
        "updated_at": iso(row["updated"]),
        "closed_by": None,
        "author_association": "OWNER",
        "reactions": _reactions(base),
        "timeline_url": f"{base}/timeline",
        "performed_via_github_app": None,
    }
    if row["is_pull"]:
        pulls = f"{api}/repos/{full_name}/pulls/{number}"
        shaped["pull_request"] = {
            "url": pulls,
            "html_url": f"{WEB}/{full_name}/pull/{number}",
            "diff_url": f"{WEB}/{full_name}/pull/{number}.diff",
            "patch_url": f"{WEB}/{full_name}/pull/{number}.patch",
            "merged_at": None,
        }
    return shaped


def _label(name: str, api: str, full_name: str) -> dict[str, Any]:
    return {
        "id": zlib.crc32(name.encode()),
        "node_id": base64.b64encode(f"010:Label{name}".encode()).decode(),
        "url": f"{api}/repos/{full_name}/labels/{name}",
        "name": name,
        "description": None,
        "color": "ededed",
        "default": False,
    }


def _reactions(base: str) -> dict[str, Any]:
    counts = dict.fromkeys(
        ("+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes"), 0
    )
    return {"url": f"{base}/reactions", "total_count": 0, **counts}


def secondary_limit(status: int, retry_after: int) -> GitHubError:
    """GitHub's answer when a client goes too fast: 403 (or 429) with `Retry-After`."""
    error = GitHubError(
        status,
        "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
        "again. If you reach out to GitHub Support for help, please include the request ID "
        "0000:FAKE:0000.",
        **{"Retry-After": str(retry_after)},
    )
    error.documentation = SECONDARY_LIMIT_DOCS
    return error


def primary_limit(retry_after: int) -> GitHubError:
    """GitHub's answer when the hour's requests are spent: 403, nothing remaining, and when
    the limit resets (UTC epoch seconds)."""
    return GitHubError(
        403,
        f"API rate limit exceeded for user ID {OWNER_ID}.",
        **{
            "x-ratelimit-limit": "5000",
            "x-ratelimit-remaining": "0",
            "x-ratelimit-reset": str(int(time.time()) + retry_after),
            "x-ratelimit-resource": "core",
        },
    )
