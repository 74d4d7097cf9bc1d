"""The moves of an effect's life (ADR 0021: above what they consult in `ledger.rules`, below what
acts on them): the one writer of its status (`transitions`), recording intent before dispatch
(`intents`, and `hotpath` for the agent API's success path), the agent API's services, one per
call (`intake` takes an intent with its claim, `agentcalls` the calls about one effect,
`listing` the pages of effects), outcomes, cancelling an upstream's dependents (`interlocks`),
compensations, recovery plans after a crash, decisions recorded as effects of their own, and
business keys. Its states are `ledger.models.states`; the events every move appends,
`ledger.rules.events`; the keyed digests that give it its identity, `ledger.policy.digests`."""
