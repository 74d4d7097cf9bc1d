"""What an operator decides about an effect: the decision kinds, which of them apply where and
why the rest are refused (`offer`), taking one (`decide`), what it will lead to before it is
taken (`preview`), the one the evidence suggests (`suggest`) and that evidence (`evidence`),
four-eyes (`approvals`: who may approve, pending retry proposals), and the decision form
(`forms`). A decision is recorded by the ledger as an effect of its own
(`ledger.effects.decision_records`)."""
