"""GitHub issues: the adapter that asks whether an effect's issue was opened, by the marker its
body carries (GitHub keeps no idempotency key), and the scheme of GitHub's signed webhooks."""

from reconcilers.providers.github.adapter import GitHubIssues

ADAPTER = GitHubIssues
