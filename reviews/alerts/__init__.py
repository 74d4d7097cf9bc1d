"""Telling people and agents: the review items' alerts (`due`), the one sender of the alert
outbox (`sender`) and where it delivers (`channels`: email, a signed webhook, Slack; `callbacks`:
an agent's own callback URL), and escalation of effects left unresolved past their tool's window
(`escalation`). The schedules that run them name them as tasks (`reviews/tasks.py`).
"""
