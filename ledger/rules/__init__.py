"""What a move consults before it acts, and the records every move writes beside its own: the
rules of halts, limits and four-eyes, interlocks, what restore mode puts in doubt, what a
provider's record proves, the review queue an effect is escalated into, the events appended to
an effect's history and the alert outbox. Nothing here decides or records a decision: that is
`ledger.effects` (moves) and the floors above it (ADR 0021)."""
