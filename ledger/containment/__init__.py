"""Keeping an incident small: halts (the kill switch), limits, four-eyes approval, the review
queue that escalates what nobody can resolve automatically, and the alert outbox that tells
people (with `plaintext` for agent-chosen text in alerts)."""
