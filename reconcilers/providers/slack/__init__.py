"""Slack: messages posted with `chat.postMessage`, found again in the channel's history.

Slack keeps no idempotency keys, so the effect's identity travels as the message's metadata
(`history.EVENT_TYPE`, with the key and the effect's id) and the lookup reads the channel's
history over the effect's window, every page, through the official `slack_sdk`
(`adapter`). Slack's signed Events API callbacks settle effects (`events`); the request
signing check (`signing`) serves any request Slack sends.
"""

from reconcilers.providers.slack.adapter import Slack

ADAPTER = Slack
