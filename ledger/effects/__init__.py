"""An effect's life: its states and the one writer of its status (`transitions`), recording
intent before dispatch (`intents`, and `hotpath` for the agent API's success path), outcomes,
interlocks between effects, compensations, recovery plans after a crash, the events every move
appends, decisions recorded as effects of their own, and the keyed digests that give an effect
its identity (request hash, idempotency key)."""
