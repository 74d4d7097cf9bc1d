"""Deciding from where the operator is, away from the pages (ADR 0020): Slack's buttons and
modals (`slack`), and the signed, single-use links of an alert email (`emaillinks`).

Nothing here decides whether a decision is allowed: a press and a followed link end in the
pages' own `reviews.decisions.decide.decide()` (its `Ask.channel` "slack" or "email"), with
its team check, four-eyes, holds, reason and per-kind fields. What is here is who is asking
(a Slack user mapped to an account, a link followed after signing in), what an alert offers
(`offers`: the decisions the effect page would offer, the suggested one first, each with the
plan preview's one-line consequence) and how each channel asks and answers.
"""
