"""Acts on the controls that keep an incident small, each recorded: halting and resuming
(`halts`), agents' keys issued, rotated and revoked (`keys`), what a duplicate at the provider
means (`duplicates`: a review item, the tool's halt), and requests an agent sent twice under two
keys (`repeated`). What a move consults of them (a halt's refusal, limits, four-eyes), the review
queue and the alert outbox are `ledger.rules`."""
